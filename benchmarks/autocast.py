"""bfloat16 autocast against float32 on this CPU: a matmul, and SmolLM2-135M's forward and backward.

Whether `ModelConfig(autocast="bfloat16")` pays depends on the CPU: with native bfloat16
(AVX512-BF16, AMX) the trainer's steps ran ~1.7x faster (docs/training.md); without it (AVX2 only)
PyTorch emulates bfloat16 matmuls. This measures the ratio on the machine it runs on, alternating
the two precisions in one process, and records whether the CPU has native bfloat16, which is what
`autocast="auto"` goes by (`art_train.models.training_autocast`).

Usage: python benchmarks/autocast.py [--runs 3] [--tokens 64]  (run it under flock /tmp/art-heavy.lock)
Writes benchmarks/results/autocast.json. `--smoke`: the tiny model, one run of 8 tokens, a 128 x 128
matmul, seconds, to --out or a temp file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULTS = Path(__file__).parent / "results" / "autocast.json"


def timed(fn) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64, help="sequence length of the model's forward and backward")
    p.add_argument("--smoke", action="store_true", help="tiny model, smallest sizes; to --out or a temp file")
    p.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    args = p.parse_args()
    base, side, out_path = "smollm2-135m", 1024, args.out or RESULTS
    if args.smoke:
        from _smoke import smoke_out, tiny_model

        base, side, args.runs, args.tokens = tiny_model(), 128, 1, 8
        out_path = smoke_out(args.out, "autocast.json")

    import torch

    from art_train.models import cpu_has_native_bf16, load_causal_lm, resolve_base_model

    a32, b32 = torch.randn(side, side), torch.randn(side, side)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    model = load_causal_lm(resolve_base_model(base), "float32", "cpu")
    ids = torch.randint(100, 40_000, (1, args.tokens))

    def step(ctx) -> None:  # noqa: ANN001
        model.zero_grad(set_to_none=True)
        with ctx:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()

    times: dict[str, list[float]] = {"matmul_fp32": [], "matmul_bf16": [], "step_fp32": [], "step_bf16": []}
    step(nullcontext())  # warm-up
    for _ in range(args.runs):  # alternate, so drift on a shared machine hits both
        times["matmul_fp32"].append(timed(lambda: a32 @ b32))
        times["matmul_bf16"].append(timed(lambda: a16 @ b16))
        times["step_fp32"].append(timed(lambda: step(nullcontext())))
        times["step_bf16"].append(timed(lambda: step(torch.autocast("cpu", dtype=torch.bfloat16))))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "platform": platform.platform(),
                    "native_bf16": cpu_has_native_bf16(), "capability": torch.backends.cpu.get_cpu_capability()},
        "workload": {"matmul": f"{side} x {side} @ {side} x {side}", "step": f"{base} forward + backward, {args.tokens} tokens",
                     "runs": args.runs},
        "seconds": times,
        "median_s": med,
        "matmul_bf16_over_fp32": med["matmul_bf16"] / med["matmul_fp32"],
        "step_bf16_over_fp32": med["step_bf16"] / med["step_fp32"],
    }  # fmt: skip
    out_path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("machine", "matmul_bf16_over_fp32", "step_bf16_over_fp32")}, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
