"""The embedded engine's decode against this machine's limit, in FLOP/s.

In one process, on smollm2-135m:
- the limit: the median FLOP/s of a 2048 x 2048 x 2048 matmul in float32, and in bfloat16 where the CPU
  has native bf16 (the engine's dtype there; float32 elsewhere), measured before and after the engines
  run, the higher kept, and the bandwidth of a plain sum over 512 MB;
- the engine: `TransformersEngine.chat` with N concurrent requests for each N in --concurrency (8 32 64),
  distinct short prompts, 64 new tokens each (ignore_eos, temperature 1, seeded), prefix cache off.
  The worker's decode steps are timed one by one (sampling included, prefill left out). A decode token
  costs 2 FLOPs per weight of every linear layer and of the output layer, plus 4 x layers x heads x
  head_dim x its position for attention. `fraction` = decode FLOP/s / the matmul limit in the engine's
  dtype. Each N runs --runs times; medians. Then one shorter pass under the profiler (in the worker thread)
  splits a decode step's time: matmul, attention, other ops, sampling, and outside ops (Python).

Run (heavy: under the shared lock):
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/engine_flops.py [--dtype float32] [--trees A B]
Writes benchmarks/results/engine_flops.json. With --trees, each tree's engine runs in its own process
(before/after, by ratio). `--smoke`: the tiny model, 2 requests of 4 tokens, a small matmul, to --out
or a temp file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from _trees import cpu_isa, run_in_tree, short_commit
from decode_bandwidth import median_s

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "engine_flops.json"
TARGET = 0.5  # of the limit, at 32 concurrent

ONE_TREE = r'''
import asyncio, json, statistics, sys, time
import torch
from art_train.engines.base import ChatRequest, SamplingParams
from art_train.engines.transformers.engine import TransformersEngine

def linear_weights(model):
    n = sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))  # packed: weight freed
    head = model.get_output_embeddings()
    return n if isinstance(head, torch.nn.Linear) else n + head.weight.numel()

async def main():
    base_model, dtype, levels, tokens, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    engine = TransformersEngine(base_model, dtype=None if dtype == "default" else dtype, prefix_cache_mb=0)
    await engine.start()
    cfg = engine.model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    weights = linear_weights(engine.model)
    attn_per_position = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim
    spent = [0.0]
    step, sample = engine.scheduler.decode_step, engine.scheduler._sample
    def timed(batch):
        t0 = time.perf_counter()
        with torch.profiler.record_function("decode_step"):
            step(batch)
        spent[0] += time.perf_counter() - t0
    def marked_sample(*a):
        with torch.profiler.record_function("sample"):
            return sample(*a)
    engine.scheduler.decode_step, engine.scheduler._sample = timed, marked_sample

    async def breakdown(n):
        """One more pass at n concurrent, profiled in the worker thread: where a decode step's time goes."""
        loop = asyncio.get_running_loop()
        prof, stopped = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]), loop.create_future()
        engine.scheduler.submit(lambda busy: prof.__enter__())
        await asyncio.gather(*[engine.chat(ChatRequest(messages=[{"role": "user", "content": f"Story {i}, please."}],
            model="m", sampling=SamplingParams(temperature=1.0, max_tokens=min(tokens, 16), ignore_eos=True, seed=i)))
            for i in range(n)])
        engine.scheduler.submit(lambda busy: (prof.__exit__(None, None, None), loop.call_soon_threadsafe(stopped.set_result, None)))
        await stopped
        us = {"matmul": 0.0, "attention": 0.0, "other_ops": 0.0, "sampling": 0.0, "outside_ops": 0.0}
        total = 0.0
        for e in prof.events():
            chain, parent = [], e.cpu_parent
            while parent is not None:
                chain.append(parent.name)
                parent = parent.cpu_parent
            if e.name == "decode_step":
                total += e.cpu_time_total
                us["outside_ops"] += e.self_cpu_time_total
            elif "decode_step" not in chain:
                continue
            elif e.name == "sample" or "sample" in chain:
                us["sampling"] += e.self_cpu_time_total
            elif e.name in ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise"):  # the last: packed
                us["matmul"] += e.self_cpu_time_total
            elif "attention" in e.name:
                us["attention"] += e.self_cpu_time_total
            else:
                us["other_ops"] += e.self_cpu_time_total
        return {k: round(v / total, 3) for k, v in us.items()}
    await engine.chat(ChatRequest(messages=[{"role": "user", "content": "Hi"}], model="m",
                                  sampling=SamplingParams(max_tokens=4)))  # first-call costs, untimed
    # the weights' own dtype: engine.dtype is "auto" where the engine keeps the checkpoint's (an AVX2-only CPU)
    dtype_name = str(next(engine.model.parameters()).dtype).removeprefix("torch.")
    out = {"engine_dtype": dtype_name, "linear_weights": weights, "by_concurrency": {}}
    for n in levels:
        rows = []
        for r in range(runs):
            spent[0], steps0 = 0.0, engine.stats["decode_steps"]
            t0 = time.perf_counter()
            replies = await asyncio.gather(*[engine.chat(ChatRequest(
                messages=[{"role": "user", "content": f"Tell me story number {r * 1000 + i} about a cat."}], model="m",
                sampling=SamplingParams(temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=i))) for i in range(n)])
            wall = time.perf_counter() - t0
            flops, decoded = 0, 0
            for reply in replies:
                p, c = reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]
                # the first token comes from the prefill; each later one from a decode step at position p + j
                for j in range(1, c):
                    flops += 2 * weights + attn_per_position * (p + j)
                decoded += c - 1
            steps = engine.stats["decode_steps"] - steps0
            rows.append({"wall_s": wall, "decode_s": spent[0], "decode_steps": steps, "decode_tokens": decoded,
                         "ms_per_step": 1000 * spent[0] / max(1, steps),
                         "decode_gflops": flops / spent[0] / 1e9, "decode_tok_s": decoded / spent[0],
                         "tok_s": sum(x["usage"]["completion_tokens"] for x in replies) / wall})
        med = lambda k: statistics.median(x[k] for x in rows)
        out["by_concurrency"][str(n)] = {"decode_gflops": round(med("decode_gflops"), 2),
                                         "decode_tok_s": round(med("decode_tok_s"), 1), "tok_s": round(med("tok_s"), 1),
                                         "ms_per_step": round(med("ms_per_step"), 2),
                                         "runs": rows, "share_of_step": await breakdown(n)}
    await engine.stop()
    import art_train
    print("RESULT " + json.dumps({"art_train": art_train.__file__, **out}), flush=True)

asyncio.run(main())
'''



def limits(size: int, stream_floats: int, runs: int) -> dict:
    """The machine's matmul FLOP/s per dtype and a plain sum's bandwidth, medians of `runs`. bfloat16 only
    where the CPU has it natively: elsewhere it is emulated (~0.3 GFLOP/s, minutes at this size) and no
    engine serves in it."""
    import torch

    from art_train.models import cpu_has_native_bf16

    out = {"matmul_size": size, "matmul_gflops": {}}
    for dtype in (torch.float32, torch.bfloat16) if cpu_has_native_bf16() else (torch.float32,):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        out["matmul_gflops"][str(dtype).removeprefix("torch.")] = round(2 * size**3 / median_s(lambda a=a, b=b: a @ b, runs) / 1e9, 1)
    big = torch.ones(stream_floats)
    out["stream_gb_s"] = round(big.numel() * 4 / median_s(lambda: big.sum(), runs) / 1e9, 1)
    return out


def machine() -> dict:
    import torch

    from art_train.models import cpu_has_native_bf16

    return {"cpus": os.cpu_count(), "isa": cpu_isa(), "native_bf16": cpu_has_native_bf16(),
            "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs="+", default=[str(ROOT)])
    parser.add_argument("--dtype", default="default", help="the engine's dtype (default: what it picks here)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny model, 2 requests of 4 tokens; to --out or a temp file")
    parser.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    args = parser.parse_args()
    base_model, size, stream_floats, out_path = "smollm2-135m", 2048, 128 * 1024 * 1024, args.out or RESULTS
    if args.smoke:
        from _smoke import smoke_out, tiny_model

        base_model, size, stream_floats, out_path = tiny_model(), 256, 1024 * 1024, smoke_out(args.out, "engine_flops.json")
        args.trees, args.concurrency, args.tokens, args.runs = [str(ROOT)], [2], 4, 1
    # the limit before and after the engines run, the higher of the two kept: on a shared machine one
    # measurement alone read 102 GFLOP/s where a dozen matmuls a minute later gave 135-175
    measured = [limits(size, stream_floats, 3)]
    print(json.dumps(measured[0]), flush=True)
    runs = []
    for tree in args.trees:
        path = Path(tree).resolve()
        result = run_in_tree(path, ONE_TREE, base_model, args.dtype, json.dumps(args.concurrency), str(args.tokens),
                             str(args.runs))
        runs.append({"tree": str(path), "commit": short_commit(path), **result})
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "by_concurrency"}), flush=True)
    measured.append(limits(size, stream_floats, 3))
    print(json.dumps(measured[1]), flush=True)
    limit = {**measured[0], "matmul_gflops": {k: max(m["matmul_gflops"][k] for m in measured)
                                              for k in measured[0]["matmul_gflops"]},
             "stream_gb_s": max(m["stream_gb_s"] for m in measured), "measured": measured}
    for run in runs:
        peak = limit["matmul_gflops"][run["engine_dtype"]]
        for level in run["by_concurrency"].values():
            level["fraction"] = round(level["decode_gflops"] / peak, 3)
        print(json.dumps({n: {k: v for k, v in x.items() if k != "runs"} for n, x in run["by_concurrency"].items()}),
              flush=True)
    at32 = runs[-1]["by_concurrency"].get("32", {}).get("fraction")
    doc = {"benchmark": f"embedded engine decode FLOP/s against the machine's matmul limit ({base_model})",
           "machine": machine(), "limit": limit, "flops_per_token": "2 x linear weights (output layer included) "
           "+ 4 x layers x heads x head_dim x position", "target": f"fraction >= {TARGET} at 32 concurrent",
           "met": None if at32 is None else at32 >= TARGET, "runs": runs,
           "command": "flock /tmp/art-heavy.lock .venv/bin/python benchmarks/engine_flops.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
