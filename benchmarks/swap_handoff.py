"""The swap, step end to first reply on the new adapter, as it is against as it was, in one run.

Registers a model on `LocalBackend` (the in-process engine), samples one batch of short rollouts,
then trains six steps on it, alternating two arms:
- ``memory``: as it is now: the new adapter's tensors handed to the engine in memory while the
  trainer writes the checkpoint in a thread (`Trainer.save_in_background`);
- ``disk``: as it was: the checkpoint written first, then read back from its folder by the engine.
For each step: `time/save_s` where the save is on the path, `time/load_adapter_s` (the load),
`time/swap_s` (load and the weight-sync check), the time from the training call's return to the first
reply on the new step, and `step_end_to_first_reply_s`: from the step's end (its tokenize and
forward/backward done) to that first reply, i.e. the call's wall time plus the reply's, less the step's
own compute. A write still in flight is waited for after each row, outside the timing.

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
    entry = backend.service.entry("handoff")
    swap, trainer = entry.swap, entry.trainer
    rows = []
    try:
        for k in range(steps):
            swap.in_memory = trainer.save_in_background = k % 2 == 1
            t_call = time.perf_counter()
            result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-4), verbose=False)
            t0 = time.perf_counter()
            r = await client.chat.completions.create(model=model.served_name(),
                                                     messages=[{"role": "user", "content": "hi"}], max_tokens=1)
            first = time.perf_counter() - t0
            assert r.model_extra["art_step"] == result.step
            m = result.metrics
            compute = m["time/tokenize_s"] + m["time/forward_backward_s"]
            rows.append({"step": result.step, "handoff": "memory" if swap.in_memory else "disk",
                         "save_on_path_s": round(m.get("time/save_s", 0.0), 4),
                         "load_adapter_s": round(m["time/load_adapter_s"], 4), "swap_s": round(m["time/swap_s"], 4),
                         "first_reply_s": round(first, 4),
                         "step_end_to_first_reply_s": round(time.perf_counter() - t_call - compute, 4),
                         "identity_match": m.get("weight_sync/identity_match")})
            await asyncio.to_thread(trainer.wait_saved)  # the next row starts with nothing in flight
    finally:
        await backend.close()

    def median(handoff: str, key: str) -> float:
        return round(statistics.median(r[key] for r in rows if r["handoff"] == handoff), 4)

    keys = ("save_on_path_s", "load_adapter_s", "swap_s", "first_reply_s", "step_end_to_first_reply_s")
    summary = {h: {k: median(h, k) for k in keys} for h in ("disk", "memory")}
    import torch

    from art_train.models import cpu_has_native_bf16

    machine = {"cpus": os.cpu_count(), "capability": torch.backends.cpu.get_cpu_capability(),
               "native_bf16": cpu_has_native_bf16(), "load_avg": os.getloadavg()}
    return {"model": model_name, "machine": machine, "rows": rows, "median": summary}


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
