"""Train a small model to solve Temporal Clue puzzles: SFT warm-up on the solver's answers, then GRPO.

    python examples/temporal_clue/train.py                 # CPU: smollm2-135m, under 20 minutes on 2 cores
    python examples/temporal_clue/train.py --config gpu    # the same recipe, bigger, on a CUDA GPU
    python examples/temporal_clue/train.py --config tiny   # a random tiny model: a smoke run in seconds

Stages: the base model, SFT on the solver's answers (the answer only, no reasoning), then GRPO with
the fraction of fields right as the reward. Each stage is evaluated greedily on puzzles generated from
held-out seeds it never trained on.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import art_core as art

try:  # imported as examples.<game>.train (tests), or run as a script
    from . import agent
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import agent  # type: ignore[no-redef]

logger = logging.getLogger("temporal_clue")

CONFIGS: dict[str, dict[str, Any]] = {
    # fixed before the first measured run, never tuned on the held-out seeds (100_000+); sized for
    # 2 shared CPU cores, where a trained sequence costs ~1-2 s
    "cpu": dict(base_model="smollm2-135m", size=3, sft_puzzles=160, sft_epochs=1, sft_lr=5e-4, sft_batch=4,
                rl_steps=4, groups=6, group_size=4, rl_lr=1e-4, eval_puzzles=100, device=None),
    "gpu": dict(base_model="qwen2.5-0.5b", size=4, sft_puzzles=4000, sft_epochs=2, sft_lr=3e-4, sft_batch=8,
                rl_steps=60, groups=16, group_size=8, rl_lr=1e-4, eval_puzzles=500, device="cuda"),
    "tiny": dict(base_model="tiny", size=3, sft_puzzles=8, sft_epochs=1, sft_lr=1e-3, sft_batch=4, rl_steps=1,
                 groups=2, group_size=2, rl_lr=1e-4, eval_puzzles=4, device=None),
}
SPLITS = {"test": 100_000, "dev": 50_000}  # first puzzle seed of each evaluation split; training stays below


async def evaluate(model: art.TrainableModel, step: int, seeds: list[int], size: int, client: Any) -> art.EvalResult:
    """Greedy answers at checkpoint `step` to the puzzles of held-out seeds, through `art.evaluate`."""

    async def answer(m: art.Model, puzzle_seed: int) -> art.Trajectory:
        return await agent.rollout(m, puzzle_seed, size=size, temperature=0.0, client=client)

    return await art.evaluate(model, answer, seeds, step=step, task_id=str, max_concurrency=64)


def by_metric(result: art.EvalResult, key: str | None) -> art.EvalResult:
    """The same games scored by a trajectory metric (None: the reward), for its interval and pairing."""
    if key is None:
        return result
    rewards = [[float(t.metrics[key]) for t in g.trajectories] for g in result.groups if g.trajectories]
    return dataclasses.replace(result, rewards=rewards, groups=[])


def figures(stages: dict[str, art.EvalResult], keys: dict[str, str | None]) -> dict[str, Any]:
    """Each metric's mean and 95% interval per stage, and the paired differences between stages."""
    out: dict[str, Any] = {}
    for name, key in keys.items():
        res = {s: by_metric(r, key) for s, r in stages.items()}
        row: dict[str, Any] = {s: {"mean": r.mean, "ci": list(r.ci)} for s, r in res.items()}
        for a, b in (("base", "sft"), ("base", "sft_rl"), ("sft", "sft_rl")):
            if a in res and b in res:
                c = art.compare(res[a], res[b])
                row[f"{b}_minus_{a}"] = {"diff": c.diff, "ci": list(c.ci), "p_value": c.p_value}
        out[name] = row
    return out


METRICS = {"score": None, "solved_rate": "solved", "formatted_rate": "formatted",
           **{f"{f}_right": f"{f}_right" for f in ("who", "what", "where", "when")}}


def record(path: Path, example: str, entry: dict[str, Any]) -> None:
    """Add or replace this run's entry (keyed by configuration and seed) in the shared results file."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault(example, {})[f"{entry['config']}-seed{entry['seed']}"] = entry
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from art_train import LocalBackend

    cfg = {**CONFIGS[args.config], **{k: v for k, v in vars(args).items() if k in CONFIGS["cpu"] and v is not None}}
    base_model = cfg["base_model"]
    if base_model == "tiny":
        from art_train.models import build_tiny_model

        base_model = str(build_tiny_model(Path(tempfile.gettempdir()) / "art-example-tiny"))
    t_start = time.perf_counter()
    seed, size = args.seed, cfg["size"]
    first = SPLITS[args.split]
    held_out = list(range(first, first + cfg["eval_puzzles"]))
    backend = LocalBackend(path=args.output, device=cfg["device"])
    model = art.TrainableModel(name=f"temporal-clue-{args.config}-s{seed}", project="temporal-clue",
                               base_model=base_model, config=art.ModelConfig(max_seq_len=512, seed=seed))
    stages: dict[str, art.EvalResult] = {}
    curve: list[dict[str, float]] = []
    try:
        await model.register(backend)
        client = model.openai_client()

        async def stage(name: str) -> None:
            stages[name] = await evaluate(model, await model.get_step(), held_out, size, client)
            logger.info("%s: %s", name, stages[name].summary())

        await stage("base")
        sft_seeds = range(seed * 10_000, seed * 10_000 + cfg["sft_puzzles"])
        expert = [agent.expert_trajectory(s, size) for s in sft_seeds]
        await model.train_sft(expert, art.SFTConfig(learning_rate=cfg["sft_lr"], num_epochs=cfg["sft_epochs"],
                                                    batch_size=cfg["sft_batch"], max_seq_len=512))
        await stage("sft")
        rl_seed = 20_000 + seed * 10_000
        for step in range(cfg["rl_steps"]):
            seeds = range(rl_seed + step * cfg["groups"], rl_seed + (step + 1) * cfg["groups"])
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(agent.rollout(model, s, size=size, client=client)
                                     for _ in range(cfg["group_size"])) for s in seeds),
                pbar_desc=f"rl step {step + 1}", max_exceptions=0)
            metrics = art.group_metrics(groups)
            result = await model.train(groups, config=art.TrainConfig(learning_rate=cfg["rl_lr"], max_seq_len=512))
            curve.append({"step": result.step, "reward": metrics["reward_mean"]})
            logger.info("rl step %d: train reward %.3f", step + 1, metrics["reward_mean"])
        await stage("sft_rl")
    finally:
        await backend.close()
    wall = time.perf_counter() - t_start
    out = {"example": "temporal_clue", "model": cfg["base_model"], "config": args.config, "settings": cfg,
           "seed": seed, "split": args.split, "project": model.project, "name": model.name,
           "steps": {"sft": 1, "rl": cfg["rl_steps"]}, "wall_s": round(wall, 1),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "eval": {"puzzles": len(held_out), "greedy": True, "seeds": f"{held_out[0]}..{held_out[-1]}"},
           "metrics": figures(stages, METRICS), "curve": curve}
    if args.record:
        record(Path(args.record), "temporal_clue", out)
    for name, r in stages.items():
        print(f"{name} (step {r.step}): " + ", ".join(
            f"{m} {t[name]['mean']:.3f} [{t[name]['ci'][0]:.3f}, {t[name]['ci'][1]:.3f}]"
            for m, t in out["metrics"].items()))
    print(art.compare(stages["base"], stages["sft_rl"]).table())
    print(art.compare(stages["sft"], stages["sft_rl"]).table())
    print(f"wall {wall:.0f} s, peak RSS {out['peak_rss_mb']} MB")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=".art-examples", help="run-directory root")
    p.add_argument("--split", choices=sorted(SPLITS), default="test",
                   help="evaluate on the held-out test seeds, or on the dev seeds used for choosing settings")
    p.add_argument("--record", help="add the run's figures to this JSON file (benchmarks/results/examples.json)")
    for key in ("size", "sft_puzzles", "sft_epochs", "sft_batch", "rl_steps", "groups", "group_size", "eval_puzzles"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int)
    for key in ("sft_lr", "rl_lr"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=float)
    p.add_argument("--base-model", dest="base_model")
    return p.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(main(parse_args()))
