"""The SFT step on short rows: one decoder call a row against several rows a call (`Policy.row_chunks`).

Distillation-shaped data: 64 two-digit addition questions with their right answers (about 25 tokens
after the shared system prompt each), batch 8, one epoch, on smollm2-135m in float32 with the
trainer's defaults. Both arms run in one process, alternating, `--runs` times each (the first pair is a
warm-up and not counted), so their ratio comes from one machine at one time: `one_row_per_call` sets
`ROW_BATCH_TOKENS` to 0 (the step before rows ran together), `rows_together` keeps the default.

Run (heavy: under the shared lock):
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/sft_step.py
Writes benchmarks/results/sft_step.json. `--smoke`: the tiny model, 8 questions, seconds, to --out or a
temp file.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results" / "sft_step.json"
ARMS = {"one_row_per_call": 0, "rows_together": None}  # ROW_BATCH_TOKENS (None: the default)


def conversations(n: int) -> list[Any]:
    import art_core as art
    from art_train.demo_tasks import ADDITION

    questions = random.Random(0).sample(ADDITION.splits["train"], n)
    return [art.Trajectory(messages=[*ADDITION.messages(q), {"role": "assistant", "content": str(q.answer)}])
            for q in questions]  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=4, help="measured steps per arm, after one warm-up pair")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out", help="where the JSON goes (default: benchmarks/results/sft_step.json; --smoke: a temp file)")
    args = p.parse_args(argv)

    from _smoke import smoke_out, tiny_model
    from scale import machine

    import art_core as art
    from art_train.trainer import Trainer
    from art_train.trainer import policy as policy_module

    default_budget = policy_module.ROW_BATCH_TOKENS
    base_model = tiny_model() if args.smoke else "smollm2-135m"
    n, runs = (8, 1) if args.smoke else (64, args.runs)
    data = conversations(n)
    model = art.TrainableModel(name="sft-bench", project="bench", base_model=base_model,
                               config=art.ModelConfig(max_seq_len=512, seed=0))  # fmt: skip
    trainer = Trainer(model, art.RunDir("bench", "sft-bench", root=tempfile.mkdtemp()), device="cpu")
    config = art.SFTConfig(learning_rate=1e-5, batch_size=8, num_epochs=1)
    steps: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for i in range(runs + 1):
        for arm, budget in ARMS.items():
            policy_module.ROW_BATCH_TOKENS = default_budget if budget is None else budget
            t0 = time.perf_counter()
            m = trainer.train_sft(data, config).metrics
            wall = time.perf_counter() - t0
            if i > 0:  # the first pair warms up allocator and kernels
                steps[arm].append({"wall_s": round(wall, 3), "trained_tokens": m["trained_tokens"],
                                   "decoder_calls": m["work/decoder_calls"],
                                   "decoder_tokens": m["work/decoder_tokens"]})  # fmt: skip
    policy_module.ROW_BATCH_TOKENS = default_budget
    trainer.close()
    out: dict[str, Any] = {
        "benchmark": "one SFT step (1 epoch) on short rows: a decoder call a row against rows together",
        "command": " ".join(["python", "benchmarks/sft_step.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(), "model": "tiny" if args.smoke else base_model,
        "workload": {"conversations": n, "batch_size": 8, "epochs": 1, "row_batch_tokens": default_budget},
        "runs": steps,
    }  # fmt: skip
    for arm, rows in steps.items():
        wall = statistics.median(r["wall_s"] for r in rows)
        out[f"{arm}_median_s"] = wall
        out[f"{arm}_tokens_per_s"] = round(rows[0]["trained_tokens"] / wall, 1)
        out[f"{arm}_decoder_calls"] = rows[0]["decoder_calls"]
        out[f"{arm}_decoder_tokens"] = rows[0]["decoder_tokens"]
    out["speedup"] = round(out["one_row_per_call_median_s"] / out["rows_together_median_s"], 3)
    path = smoke_out(args.out, "sft_step.json") if args.smoke else Path(args.out or RESULTS)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("runs", "machine")}, indent=1))  # noqa: T201
    return out


if __name__ == "__main__":
    main()
