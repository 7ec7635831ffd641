"""Scaling on one box: rollout throughput with 1 and 2 engine replicas, step time with 1 and 2 trainer ranks.

Two arms, each setting in a fresh process (a replica set or a process group would outlive the arm):
  rollout  `LocalBackend(config=BackendConfig(replicas=N))` serving a `TrainableModel` (its step-0 LoRA),
           `--requests` concurrent chat requests of exactly `--max-tokens` new tokens (`ignore_eos`)
           through the OpenAI endpoint, after one warm-up request; completion tokens / wall seconds.
           N=1 is the embedded engine in the backend's process; N=2 is two embedded-engine worker
           processes behind the router. Processes alternate 1, 2, 1, 2 (`--runs` rounds).
  step     the same GRPO groups (`--groups` x `--group-size`, fixed prompt and completion lengths, so the
           2-rank shards are even) trained `--steps` times by a `Trainer` on 1 rank, and on 2 ranks
           (`Ranks(2, "cpu")`, what `BackendConfig(train_procs=2)` builds); wall seconds per `train` call.
           The first step is reported apart (`first_step_s`: on 2 ranks it starts rank 1 and joins the
           gloo group); `step_s` is the median of the rest.
  fsdp     the step arm on 2 ranks with the frozen base sharded (`Ranks(2, "cpu", shard="fsdp")`, what
           `BackendConfig(train_procs=2, train_shard="fsdp")` builds).
Each step setting also reports every rank's peak RSS (`peak_rss_bytes`, rank 0 first), and ranks 1..N-1's
peak when rank 0 starts tokenizing the first step (`load_peak_rss_bytes`: after they loaded, or received,
their base; before their first forward).

Run (heavy: under the shared lock):
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/scale.py [--base-model smollm2-135m]
Writes benchmarks/results/scale.json. `--smoke`: the tiny model, smallest sizes, to --out or a temp file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULTS = Path(__file__).parent / "results" / "scale.json"
WHY = ("2 cores bound both. Replicas: 2 worker processes of cores // 2 torch threads each share the same "
       "2 cores that 1 engine already keeps busy by batching every request in flight; a second replica adds "
       "a second copy of the weights, an HTTP hop and halves each batch, not compute. Ranks: each rank trains "
       "half the rows, but rank 0 keeps its torch threads while rank 1 gets cpus // 2 = 1, so 3 threads share "
       "2 cores, and every optimizer step adds a gloo all-reduce of the LoRA gradients. More processes pay only "
       "where each gets cores (or a GPU) of its own.")


def machine() -> dict[str, Any]:
    """The CPU (model and the instruction sets that matter to torch here), core count and load."""
    import torch

    from art_train.models import cpu_has_native_bf16

    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
    return {"cpu": model, "cpus": os.cpu_count(), "flags": [f for f in wanted if f in flags],
            "capability": torch.backends.cpu.get_cpu_capability(), "native_bf16": cpu_has_native_bf16(),
            "torch": torch.__version__, "load_avg": os.getloadavg()}


# -- the rollout arm --------------------------------------------------------------------------------

async def rollout(base_model: str, replicas: int, requests: int, max_tokens: int) -> dict[str, Any]:
    import art_core as art
    from art_train import BackendConfig, LocalBackend

    backend = LocalBackend(config=BackendConfig(path=tempfile.mkdtemp(), device="cpu", replicas=replicas,
                                                sync_probe_tokens=0))
    model = art.TrainableModel(name="scale", project="bench", base_model=base_model,
                               config=art.ModelConfig(max_seq_len=512, seed=0))
    try:
        t0 = time.perf_counter()
        await model.register(backend)
        start_s = time.perf_counter() - t0
        client = model.openai_client(capture=False)

        async def one(i: int) -> int:
            r = await client.chat.completions.create(
                model=model.served_name(), messages=[{"role": "user", "content": f"Request {i}: tell me a story."}],
                max_tokens=max_tokens, temperature=1.0, seed=i, extra_body={"ignore_eos": True})
            assert r.usage is not None
            return r.usage.completion_tokens

        await asyncio.gather(*(one(-1 - i) for i in range(replicas)))  # warm-up: one request per replica
        t0 = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(i) for i in range(requests))))
        seconds = time.perf_counter() - t0
    finally:
        await backend.close()
    return {"replicas": replicas, "completion_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "start_s": start_s}


# -- the step arm -----------------------------------------------------------------------------------

def make_groups(groups: int, group_size: int, prompt_words: int, completion: int, seed: int = 0) -> list[Any]:
    """`groups` x `group_size` trajectories of fixed lengths (random ids), so every rank gets as many tokens."""
    import art_core as art

    rng = random.Random(seed)
    out = []
    for g in range(groups):
        prompt = " ".join(f"w{rng.randrange(10_000)}" for _ in range(prompt_words))
        trajs = []
        for k in range(group_size):
            ids = [rng.randrange(100, 40_000) for _ in range(completion)]
            t = art.Trajectory(messages=[{"role": "user", "content": prompt}], reward=float(rng.random()))
            t.turns.append(art.assistant_turn(f"answer {g}.{k}", token_ids=ids, logprobs=[-1.0] * completion))
            trajs.append(t)
        out.append(art.TrajectoryGroup(trajs))
    return out


def peak_rss(pid: int | None = None) -> int:
    """A process's peak resident set (VmHWM) in bytes; this one's when `pid` is None."""
    text = Path(f"/proc/{pid or 'self'}/status").read_text()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("VmHWM:"))) * 1024


def step(base_model: str, procs: int, steps: int, shape: dict[str, int], shard: str | None = None) -> dict[str, Any]:
    import torch

    import art_core as art
    from art_train.trainer import Trainer
    from art_train.trainer.distributed import Ranks

    model = art.TrainableModel(name="scale", project="bench", base_model=base_model)
    ranks = Ranks(procs, "cpu", timeout_s=600, shard=shard) if procs > 1 else None
    trainer = Trainer(model, art.RunDir("bench", "scale", root=tempfile.mkdtemp()), device="cpu", ranks=ranks)
    groups = make_groups(**shape)
    rows = []
    loaded: list[int] = []

    def at_load(event: dict[str, Any]) -> None:
        if ranks is not None and not loaded and event["phase"] == "tokenize":
            loaded.extend(peak_rss(pid) for pid in ranks.pids())

    try:
        for _ in range(steps):
            t0 = time.perf_counter()
            m = trainer.train(groups, art.TrainConfig(learning_rate=1e-5), progress=at_load).metrics
            rows.append({"wall_s": time.perf_counter() - t0, "forward_backward_s": m["time/forward_backward_s"],
                         "trained_tokens": m["trained_tokens"], "loss": m["loss"]})
        peaks = [peak_rss(), *(peak_rss(pid) for pid in (ranks.pids() if ranks else []))]
    finally:
        if ranks is not None:
            ranks.stop()
    return {"procs": procs, "shard": shard, "rank0_torch_threads": torch.get_num_threads(), "steps": rows,
            "peak_rss_bytes": peaks, "load_peak_rss_bytes": loaded}


# -- the parent: alternate fresh processes, take medians ------------------------------------------

def child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {out.returncode}:\n{out.stderr[-4000:]}")
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--arms", default="rollout,step")
    ap.add_argument("--runs", type=int, default=2, help="rollout rounds (each: a fresh 1-replica, then 2-replica process)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3, help="steps per rank count (the first reported apart)")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--prompt-words", type=int, default=20)
    ap.add_argument("--completion", type=int, default=64)
    ap.add_argument("--child", choices=["rollout", "step"], help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--shard", choices=["fsdp"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="tiny model, smallest sizes; to --out or a temp file")
    ap.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    args = ap.parse_args()
    shape = {"groups": args.groups, "group_size": args.group_size, "prompt_words": args.prompt_words,
             "completion": args.completion}
    if args.child == "rollout":
        found = asyncio.run(rollout(args.base_model, args.n, args.requests, args.max_tokens))
        print("RESULT " + json.dumps(found), flush=True)  # noqa: T201 - to the parent
        return
    if args.child == "step":
        print("RESULT " + json.dumps(step(args.base_model, args.n, args.steps, shape, args.shard)),  # noqa: T201
              flush=True)
        return

    out_path = args.out or RESULTS
    if args.smoke:
        from _smoke import smoke_out, tiny_model

        args.base_model, out_path = tiny_model(), smoke_out(args.out, "scale.json")
        args.runs, args.requests, args.max_tokens = 1, 4, 8
        shape = {"groups": 2, "group_size": 2, "prompt_words": 5, "completion": 8}
    command = (f"python benchmarks/scale.py --base-model {args.base_model} --arms {args.arms} --runs {args.runs} "
               f"--requests {args.requests} --max-tokens {args.max_tokens} --steps {args.steps} "
               f"--groups {shape['groups']} --group-size {shape['group_size']} "
               f"--prompt-words {shape['prompt_words']} --completion {shape['completion']}")
    arms = args.arms.split(",")
    result: dict[str, Any] = {
        "machine": machine(), "command": command, "why": WHY,
        "workload": {"base_model": args.base_model, "device": "cpu", "lora_rank": 8,
                     "rollout": {"requests": args.requests, "max_tokens": args.max_tokens, "ignore_eos": True,
                                 "temperature": 1.0, "runs_per_arm": args.runs, "engine": "transformers (embedded)"},
                     "step": {**shape, "steps": args.steps, "learning_rate": 1e-5}},
    }
    t_all = time.perf_counter()
    if "rollout" in arms:
        runs: dict[str, list[dict[str, Any]]] = {"1": [], "2": []}
        for _ in range(args.runs):
            for n in (1, 2):  # alternating
                common = ["--base-model", args.base_model, "--requests", str(args.requests),
                          "--max-tokens", str(args.max_tokens)]
                r = child(["--child", "rollout", "--n", str(n), *common])
                runs[str(n)].append(r)
                print(f"rollout replicas={n}: {r['tokens_per_s']:.1f} tok/s", flush=True)  # noqa: T201
        tok_s = {n: statistics.median(r["tokens_per_s"] for r in rs) for n, rs in runs.items()}
        result["rollout"] = {"runs": runs, "replicas_1_tok_s": tok_s["1"], "replicas_2_tok_s": tok_s["2"]}
        result["replicas_2_over_1"] = tok_s["2"] / tok_s["1"]
    settings = [(n, None) for n in (1, 2) if "step" in arms] + [(2, "fsdp")] * ("fsdp" in arms)
    steps: dict[str, dict[str, Any]] = {}
    for n, shard in settings:
        common = ["--base-model", args.base_model, "--steps", str(args.steps),
                  *(x for k, v in shape.items() for x in (f"--{k.replace('_', '-')}", str(v)))]
        r = child(["--child", "step", "--n", str(n), *common, *(["--shard", shard] if shard else [])])
        walls = [s["wall_s"] for s in r["steps"]]
        r["first_step_s"], r["step_s"] = walls[0], statistics.median(walls[1:])
        name = f"{n}-{shard}" if shard else str(n)
        steps[name] = r
        print(f"step ranks={name}: first {walls[0]:.2f} s, then median {r['step_s']:.2f} s, peak RSS per rank "  # noqa: T201
              f"{[round(b / 1e6) for b in r['peak_rss_bytes']]} MB (ranks 1.. at load "
              f"{[round(b / 1e6) for b in r['load_peak_rss_bytes']]} MB)", flush=True)
    if "step" in arms:
        result["step"] = {"ranks": steps, "ranks_1_step_s": steps["1"]["step_s"], "ranks_2_step_s": steps["2"]["step_s"],
                          "ranks_2_first_step_s": steps["2"]["first_step_s"]}
        result["ranks_2_over_1"] = steps["2"]["step_s"] / steps["1"]["step_s"]  # > 1: 2 ranks are slower
    if "fsdp" in arms:
        result["fsdp"] = steps["2-fsdp"]
    result["wall_s"] = time.perf_counter() - t_all
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: result[k] for k in ("replicas_2_over_1", "ranks_2_over_1", "wall_s") if k in result}
    print(json.dumps(summary, indent=2))  # noqa: T201 - a script's output


if __name__ == "__main__":
    main()
