"""What a decode step of SmolLM2-135M costs on this CPU, set against the memory it reads.

The embedded engine decodes one token for every running sequence per forward pass. At a few rows a
step reads far more bytes (the float32 weights, and every row's KV cache) than it computes on, so it
may be bound by memory bandwidth or by small matrix multiplies running below peak; comparing the
step's bytes per second with a plain sum's tells which. This measures, in one process:
- the bandwidth of a plain sum over 512 MB (`stream_gb_s`);
- the output layer (49k x 576, tied to the embeddings) at `--rows` rows, in float32 and bfloat16;
- one decode step of the model at `--rows` rows over KV caches of each `--contexts` length, kept as
  the engine keeps them (`engines.kv.GrowingLayer`; random keys and values: the cost does not depend
  on them), and the bytes it must read (weights plus KV) per second of the step.

Usage: python benchmarks/decode_bandwidth.py [--rows 8 32] [--contexts 16 1000 2000] [--runs 5]
(run it under flock /tmp/art-heavy.lock). Writes benchmarks/results/decode_bandwidth.json.
`--smoke`: the tiny model, 2 rows, contexts 4 and 16, a 4 MB sum, one run, to --out or a temp file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULTS = Path(__file__).parent / "results" / "decode_bandwidth.json"


def median_s(fn, runs: int) -> float:  # noqa: ANN001
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[8, 32])
    p.add_argument("--contexts", type=int, nargs="+", default=[16, 1000, 2000])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help="tiny model, smallest sizes; to --out or a temp file")
    p.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    args = p.parse_args()
    base, sum_floats, out_path = "smollm2-135m", 128 * 1024 * 1024, args.out or RESULTS  # 512 MB of float32
    if args.smoke:
        from _smoke import smoke_out, tiny_model

        base, sum_floats, args.rows, args.contexts, args.runs = tiny_model(), 1024 * 1024, [2], [4, 16], 1
        out_path = smoke_out(args.out, "decode_bandwidth.json")

    import torch
    from transformers import DynamicCache

    from art_train.engines.kv import grow_in_place
    from art_train.models import cpu_has_native_bf16, load_causal_lm, resolve_base_model

    big = torch.ones(sum_floats)
    stream_s = median_s(lambda: big.sum(), args.runs)
    model = load_causal_lm(resolve_base_model(base), "float32", "cpu")
    cfg = model.config
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    weight = model.get_output_embeddings().weight  # [vocab, hidden]
    weight_bf16 = weight.detach().bfloat16()
    kv_heads = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    by_rows = {}
    for rows in args.rows:
        x = torch.randn(rows, weight.shape[1])
        head = {"float32": median_s(lambda x=x: torch.nn.functional.linear(x, weight), args.runs)}
        xb = x.bfloat16()
        head["bfloat16"] = median_s(lambda xb=xb: torch.nn.functional.linear(xb, weight_bf16), args.runs)

        steps = []
        for ctx in args.contexts:
            layers = [(torch.randn(rows, kv_heads, ctx, head_dim), torch.randn(rows, kv_heads, ctx, head_dim))
                      for _ in range(cfg.num_hidden_layers)]  # fmt: skip
            cache = grow_in_place(DynamicCache(ddp_cache_data=layers))  # the engine's cache: grows in place
            state = {"at": ctx}

            def decode(cache: object = cache, state: dict = state, rows: int = rows) -> None:
                at = state["at"]
                ids = torch.randint(100, 40_000, (rows, 1))
                mask = torch.ones(rows, at + 1, dtype=torch.long)
                positions = torch.full((rows, 1), at)
                with torch.inference_mode():
                    model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                          logits_to_keep=1)  # fmt: skip
                state["at"] = at + 1

            kv_bytes = 2 * cfg.num_hidden_layers * rows * kv_heads * ctx * head_dim * 4
            seconds = median_s(decode, args.runs)
            steps.append({"context": ctx, "step_s": seconds, "kv_bytes": kv_bytes,
                          "read_gb_s": (weight_bytes + kv_bytes) / seconds / 1e9})  # fmt: skip
        by_rows[str(rows)] = {"output_layer_s": head, "output_layer_bf16_over_fp32": head["bfloat16"] / head["float32"],
                              "decode_steps": steps,
                              "step_longest_over_shortest": steps[-1]["step_s"] / steps[0]["step_s"]}  # fmt: skip
    out = {
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "platform": platform.platform(),
                    "native_bf16": cpu_has_native_bf16(), "capability": torch.backends.cpu.get_cpu_capability()},
        "model": base,
        "runs": args.runs,
        "stream_gb_s": big.numel() * 4 / stream_s / 1e9,
        "weight_bytes": weight_bytes,
        "rows": by_rows,
    }  # fmt: skip
    out_path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
