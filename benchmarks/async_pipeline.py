"""Synchronous vs asynchronous training on the `art demo` addition task, in one run, same seeds and steps.

For each seed and mode, a fresh `LocalBackend` (in-process engine, CPU) trains smollm2-135m with the
demo's recipe (`art demo`: 16 GRPO steps of 8 questions x 6 rollouts at temperature 0.7, learning
rate 3e-4; `--steps`, `--groups`, `--group-size` change it):
- sync: the plain loop (gather a batch, train it with inference held, gather the next);
- async: `art.PipelineTrainer` with `max_steps_off_policy=1` (the next batch's rollouts run while a
  step trains; ``TrainConfig(mode="async")``).
It records the wall time per step, the share of the wall time with no request in flight (the engine
idle), the off-policy metrics, and the held-out reward (greedy, the first `--eval-size` test
questions, 64 as the demo) of the base model and at the end, with 95% intervals and, per seed, the
paired difference async - sync (`art.compare`). On one CPU box rollouts and training share the cores, so overlap buys little here; the
summary also gives what the same measured times predict where inference and training have their own
devices: sync = n (R + T), async = R + n max(R, T), with R the rollout time of a batch and T a step's
train-and-swap time, both from the sync run.

Run (heavy: under the shared lock):
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/async_pipeline.py
Writes benchmarks/results/async_pipeline.json.
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
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import art_core as art  # noqa: E402
from art_train import LocalBackend  # noqa: E402
from art_train.demo_tasks import ADDITION  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "async_pipeline.json"


class Busy:
    """Seconds with at least one rollout request in flight."""

    def __init__(self) -> None:
        self.inflight, self.since, self.total = 0, 0.0, 0.0

    def enter(self) -> None:
        if self.inflight == 0:
            self.since = time.perf_counter()
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.total += time.perf_counter() - self.since


async def one_run(mode: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    backend = LocalBackend(path=tempfile.mkdtemp(), device="cpu")
    model = art.TrainableModel(name=f"{mode}-{seed}", project="bench", base_model=args.model,
                               config=art.ModelConfig(max_seq_len=256, seed=seed))
    await model.register(backend)
    busy = Busy()
    rollout_s: list[float] = []

    async def rollout(model: art.Model, question: Any) -> art.Trajectory:
        busy.enter()
        try:
            return await ADDITION.rollout(model, question, temperature=0.7)
        finally:
            busy.leave()

    config = art.TrainConfig(learning_rate=3e-4)
    train = ADDITION.splits["train"]
    results: list[art.TrainResult] = []
    t0 = time.perf_counter()
    if mode == "sync":
        for batch in art.iterate_dataset(train, args.groups, initial_step=0, seed=seed):
            if batch.step >= args.steps:
                break
            t_r = time.perf_counter()
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(rollout(model, q) for _ in range(args.group_size)) for q in batch.items),
                show_progress=False)
            rollout_s.append(time.perf_counter() - t_r)
            results.append(await model.train(groups, config=config, verbose=False))
    else:
        pipeline = art.PipelineTrainer(model, rollout, train, groups_per_step=args.groups, group_size=args.group_size,
                                       config=config, max_steps_off_policy=1, seed=seed)
        results = await pipeline.run(num_steps=args.steps)
    wall = time.perf_counter() - t0
    held_out = await art.evaluate(model, ADDITION.eval_rollout, ADDITION.splits["test"][: args.eval_size],
                                  show_progress=False)
    await backend.close()
    HELD_OUT[(mode, seed)] = held_out
    m = [r.metrics for r in results]
    return {
        "mode": mode, "seed": seed, "steps": len(results), "wall_s": round(wall, 1),
        "wall_per_step_s": round(wall / len(results), 2),
        "engine_idle_share": round(1 - busy.total / wall, 3),
        "train_and_swap_s": [round(x.get("time/step_s", 0) + x.get("time/swap_s", 0), 2) for x in m],
        "rollout_batch_s": [round(x, 2) for x in rollout_s],
        "off_policy_age_mean": [x.get("off_policy/age_mean") for x in m],
        "off_policy_dropped": [x.get("off_policy/dropped") for x in m],
        "held_out_reward": round(held_out.mean, 4), "held_out_ci": [round(x, 4) for x in held_out.ci],
        "held_out_questions": len(held_out.task_ids),
    }


HELD_OUT: dict[tuple[str, int], art.EvalResult] = {}


async def base_score(seed: int, args: argparse.Namespace) -> art.EvalResult:
    """The untrained model on the same held-out questions (the demo's "before")."""
    backend = LocalBackend(path=tempfile.mkdtemp(), device="cpu")
    model = art.TrainableModel(name=f"base-{seed}", project="bench", base_model=args.model,
                               config=art.ModelConfig(max_seq_len=256, seed=seed))
    await model.register(backend)
    try:
        return await art.evaluate(model, ADDITION.eval_rollout, ADDITION.splits["test"][: args.eval_size],
                                  show_progress=False)
    finally:
        await backend.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs, paired = [], []
    base = await base_score(args.seeds[0], args)  # greedy: the same for every seed
    for seed in args.seeds:
        for mode in ("sync", "async"):
            runs.append(await one_run(mode, seed, args))
            print(json.dumps(runs[-1]), flush=True)  # noqa: T201 - a script's progress
        c = art.compare(HELD_OUT[("sync", seed)], HELD_OUT[("async", seed)])
        paired.append({"seed": seed, "async_minus_sync": round(c.diff, 4), "ci": [round(x, 4) for x in c.ci],
                       "p_value": round(c.p_value, 3)})
    sync = [r for r in runs if r["mode"] == "sync"]
    r_mean = statistics.mean(x for r in sync for x in r["rollout_batch_s"])
    t_mean = statistics.mean(x for r in sync for x in r["train_and_swap_s"])
    n = args.steps
    return {
        "runs": runs,
        "held_out_base": {"reward": round(base.mean, 4), "ci": [round(x, 4) for x in base.ci]},
        "paired": paired,
        "summary": {mode: {"wall_per_step_s": statistics.mean(r["wall_per_step_s"] for r in runs if r["mode"] == mode),
                           "engine_idle_share": statistics.mean(r["engine_idle_share"] for r in runs if r["mode"] == mode),
                           "held_out_reward": [r["held_out_reward"] for r in runs if r["mode"] == mode]}
                    for mode in ("sync", "async")},
        "separate_devices_model": {"R_rollout_batch_s": round(r_mean, 2), "T_train_and_swap_s": round(t_mean, 2),
                                   "sync_wall_s": round(n * (r_mean + t_mean), 1),
                                   "async_wall_s": round(r_mean + n * max(r_mean, t_mean), 1)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=6)
    parser.add_argument("--eval-size", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--smoke", action="store_true", help="the tiny model, 1 step of 2 x 2, one seed (seconds)")
    parser.add_argument("--out", default=None, help="where the JSON goes (default: results/, or a temp file with --smoke)")
    args = parser.parse_args()
    if args.smoke:
        from _smoke import tiny_model

        args.model, args.steps, args.groups, args.group_size, args.eval_size, args.seeds = tiny_model(), 1, 2, 2, 2, [0]
    out = asyncio.run(main_async(args))
    import torch

    from art_train.models import cpu_has_native_bf16

    out["machine"] = {"cpus": os.cpu_count(), "capability": torch.backends.cpu.get_cpu_capability(),
                      "native_bf16": cpu_has_native_bf16(), "load_avg_at_end": os.getloadavg()}
    out["command"] = ("python benchmarks/async_pipeline.py " + f"--model {args.model} --steps {args.steps} --groups "
                      f"{args.groups} --group-size {args.group_size} --eval-size {args.eval_size} --seeds "
                      + " ".join(map(str, args.seeds)))
    if args.smoke or args.out:
        from _smoke import smoke_out

        path = smoke_out(args.out, "async_pipeline.json")
    else:
        path = RESULTS
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))  # noqa: T201


if __name__ == "__main__":
    main()
