"""The swap with the adapter handed over in memory against a disk round trip, in one run.

Registers a model on `LocalBackend` (the in-process engine), samples one batch of short rollouts,
then trains six steps on it, alternating the hand-off: the new adapter's tensors given to the engine
in memory (the default for an in-process engine), or written and read back from the checkpoint
folder (as before). For each step: `time/load_adapter_s` (the load), `time/swap_s` (load and the
weight-sync check) and the time from the training call's return to the first reply on the new step.

Run (heavy: under the shared lock):
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/swap_handoff.py [--model smollm2-135m]
Writes benchmarks/results/swap_handoff.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import art_core as art  # noqa: E402
from art_train import LocalBackend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "swap_handoff.json"
PROMPTS = ["Name a colour.", "Count to three.", "Say hello.", "What is two plus two?"]


async def run(model_name: str, steps: int) -> dict:
    backend = LocalBackend(path=tempfile.mkdtemp(), device="cpu")
    model = art.TrainableModel(name="handoff", project="bench", base_model=model_name,
                               config=art.ModelConfig(max_seq_len=256, seed=0))
    await model.register(backend)
    client = model.openai_client()

    async def one(prompt: str, i: int) -> art.Trajectory:
        with art.capture() as traj:
            r = await client.chat.completions.create(model=model.served_name(), messages=[{"role": "user", "content": prompt}],
                                                     max_tokens=16, temperature=1.0, seed=i)
        traj.reward = float(len(r.choices[0].message.content or "") % 5)
        return traj

    groups = await art.gather_trajectory_groups(
        [art.TrajectoryGroup(one(p, i) for i in range(4)) for p in PROMPTS], show_progress=False)
    swap = backend.service.entry("handoff").swap
    rows = []
    try:
        for k in range(steps):
            swap.in_memory = k % 2 == 1
            result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-4), verbose=False)
            t0 = time.perf_counter()
            r = await client.chat.completions.create(model=model.served_name(),
                                                     messages=[{"role": "user", "content": "hi"}], max_tokens=1)
            first = time.perf_counter() - t0
            assert r.model_extra["art_step"] == result.step
            rows.append({"step": result.step, "handoff": "memory" if swap.in_memory else "disk",
                         "load_adapter_s": round(result.metrics["time/load_adapter_s"], 4),
                         "swap_s": round(result.metrics["time/swap_s"], 4), "first_reply_s": round(first, 4),
                         "identity_match": result.metrics.get("weight_sync/identity_match")})
    finally:
        await backend.close()

    def median(handoff: str, key: str) -> float:
        return round(statistics.median(r[key] for r in rows if r["handoff"] == handoff), 4)

    summary = {h: {k: median(h, k) for k in ("load_adapter_s", "swap_s", "first_reply_s")} for h in ("disk", "memory")}
    return {"model": model_name, "rows": rows, "median": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--smoke", action="store_true", help="the tiny model, 2 steps (seconds)")
    parser.add_argument("--out", default=None, help="where the JSON goes (default: results/, or a temp file with --smoke)")
    args = parser.parse_args()
    if args.smoke:
        from _smoke import tiny_model

        args.model, args.steps = tiny_model(), 2  # one step each way: disk, then memory
    out = asyncio.run(run(args.model, args.steps))
    out["command"] = f"python benchmarks/swap_handoff.py --model {args.model} --steps {args.steps}"
    if args.smoke or args.out:
        from _smoke import smoke_out

        path = smoke_out(args.out, "swap_handoff.json")
    else:
        path = RESULTS
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["median"], indent=2))  # noqa: T201 - a script's output


if __name__ == "__main__":
    main()
