"""A training step beside an idle engine: the engine's worker thread kept against ended.

torch on CPU runs its parallel ops on an OpenMP pool per thread that ran one. libgomp stops spinning
between parallel regions once it manages more threads than there are CPUs, so an idle engine thread that
keeps its pool slows a trainer step on another thread (as `LocalBackend` runs it: `asyncio.to_thread` on
a fresh thread). The engine's worker now ends after `idle_s` seconds with nothing to do. Both arms in one
process, alternating, on one engine (the default serving dtype) and one trainer: "kept" serves a request
with `idle_s=None` (the thread and its pool stay), "ended" with a short `idle_s` and waits for the thread
to end; then one SFT step (distillation-shaped rows, as `sft_step.py`) runs on a fresh thread.

Run (heavy: under the shared lock):
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/idle_pool.py
Writes benchmarks/results/idle_pool.json. `--smoke`: the tiny model, 8 questions, one run, to --out or a
temp file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results" / "idle_pool.json"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from _smoke import tiny_model
    from scale import machine
    from sft_step import conversations

    import art_core as art
    from art_train.engines.base import ChatRequest, SamplingParams
    from art_train.engines.transformers.engine import TransformersEngine
    from art_train.threads import use_fresh_threads
    from art_train.trainer import Trainer

    use_fresh_threads()  # as LocalBackend: each to_thread call on a thread that ends with it
    base_model = tiny_model() if args.smoke else "smollm2-135m"
    n, runs = (8, 1) if args.smoke else (64, args.runs)
    data = conversations(n)
    model = art.TrainableModel(name="idle-bench", project="bench", base_model=base_model,
                               config=art.ModelConfig(max_seq_len=512, seed=0))  # fmt: skip
    trainer = await asyncio.to_thread(Trainer, model, art.RunDir("bench", "idle-bench", root=tempfile.mkdtemp()),
                                      device="cpu")
    engine = TransformersEngine(trainer.base_path, model_config=model.config, device="cpu", idle_s=None)
    await engine.start()
    config = art.SFTConfig(learning_rate=1e-5, batch_size=8, num_epochs=1)
    request = ChatRequest(messages=[{"role": "user", "content": "What is 12 + 30?"}], model="m",
                          sampling=SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
    steps: dict[str, list[float]] = {"kept": [], "ended": []}
    try:
        for i in range(runs + 1):
            for arm in steps:
                engine.scheduler.idle_s = None if arm == "kept" else 0.2
                await engine.chat(request)  # the worker ran parallel ops: its thread has a pool
                worker = engine.scheduler.thread
                if arm == "ended" and worker is not None:
                    await asyncio.to_thread(worker.join, 30)
                alive = engine.scheduler.thread is not None and engine.scheduler.thread.is_alive()
                assert alive == (arm == "kept"), f"{arm}: the engine's thread is {'alive' if alive else 'gone'}"
                t0 = time.perf_counter()
                await asyncio.to_thread(trainer.train_sft, data, config)
                if i > 0:  # the first pair warms up allocator and kernels
                    steps[arm].append(round(time.perf_counter() - t0, 3))
    finally:
        await engine.stop()
        trainer.close()
    medians = {arm: statistics.median(v) for arm, v in steps.items()}
    engine_dtype = str(next(engine.model.parameters()).dtype).removeprefix("torch.")  # engine.dtype may be "auto"
    return {
        "benchmark": "one SFT step on a fresh thread beside an idle engine: its worker thread kept against ended",
        "command": " ".join(["python", "benchmarks/idle_pool.py", *sys.argv[1:]]),
        "machine": machine(), "model": "tiny" if args.smoke else base_model, "engine_dtype": engine_dtype,
        "rows": n, "runs": steps, "median_s": medians,
        "kept_over_ended": round(medians["kept"] / medians["ended"], 3),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=4, help="measured steps per arm, after one warm-up pair")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out", help="where the JSON goes (default: benchmarks/results/idle_pool.json; --smoke: a temp file)")
    args = p.parse_args(argv)
    from _smoke import smoke_out

    doc = asyncio.run(run(args))
    out = smoke_out(args.out, "idle_pool.json") if args.smoke else Path(args.out or RESULTS)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("median_s", "kept_over_ended", "engine_dtype")}))
    return doc


if __name__ == "__main__":
    main()
