"""Train a small model to solve Temporal Clue puzzles: SFT warm-up on the solver's answers, then GRPO.

    python examples/temporal_clue/train.py                 # CPU: smollm2-135m, under 20 minutes on 2 cores
    python examples/temporal_clue/train.py --config gpu    # the same recipe, bigger, on a CUDA GPU
    python examples/temporal_clue/train.py --config tiny   # a random tiny model: a smoke run in seconds

Stages: the base model, SFT on the solver's answers (the answer only, no reasoning), then GRPO with
the fraction of fields right as the reward. Each stage is evaluated greedily on puzzles generated from
held-out seeds it never trained on. With `--eval-every N` the held-out puzzles are also scored every
N RL steps (the RL curve, in `curve`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import art_core as art

try:  # imported as examples.<game>.train (tests), or run as a script
    from .. import train_common as common
    from . import agent
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/, for train_common
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import agent  # type: ignore[no-redef]
    import train_common as common  # type: ignore[no-redef]

logger = logging.getLogger("temporal_clue")

CONFIGS: dict[str, dict[str, Any]] = {
    # fixed before the first measured run, never tuned on the held-out seeds (100_000+); sized for
    # 2 shared CPU cores, where a trained sequence costs ~1-2 s
    "cpu": dict(base_model="smollm2-135m", size=3, sft_puzzles=160, sft_epochs=1, sft_lr=5e-4, sft_batch=4,
                rl_steps=4, groups=6, group_size=4, rl_lr=1e-4, rl_temperature=1.0, eval_puzzles=100, eval_every=0, device=None),
    "gpu": dict(base_model="qwen2.5-0.5b", size=4, sft_puzzles=4000, sft_epochs=2, sft_lr=3e-4, sft_batch=8,
                rl_steps=60, groups=16, group_size=8, rl_lr=1e-4, rl_temperature=1.0, eval_puzzles=500, eval_every=0,
                device="cuda"),
    "tiny": dict(base_model="tiny", size=3, sft_puzzles=8, sft_epochs=1, sft_lr=1e-3, sft_batch=4, rl_steps=1,
                 groups=2, group_size=2, rl_lr=1e-4, rl_temperature=1.0, eval_puzzles=4, eval_every=0, device=None),
}


async def evaluate(model: art.TrainableModel, step: int, seeds: list[int], size: int, client: Any) -> art.EvalResult:
    """Greedy answers at checkpoint `step` to the puzzles of held-out seeds, through `art.evaluate`."""

    async def answer(m: art.Model, puzzle_seed: int) -> art.Trajectory:
        return await agent.rollout(m, puzzle_seed, size=size, temperature=0.0, client=client)

    return await art.evaluate(model, answer, seeds, step=step, task_id=str, max_concurrency=64)


METRICS = {"score": None, "solved_rate": "solved", "formatted_rate": "formatted",
           **{f"{f}_right": f"{f}_right" for f in ("who", "what", "where", "when")}}


PLAYERS = {"random_legal": "one option per field chosen uniformly (agent.random_trajectory)",
           "teacher": "the exhaustive solver (agent.expert_trajectory)"}
HEADLINE = "metrics"


async def baselines(cfg: dict[str, Any], seeds: list[int],
                    trained: dict[str, art.EvalResult] | None = None) -> dict[str, Any]:
    """The random legal player and the teacher on the held-out puzzles of `evaluate`; with the trained
    model's results (`metrics`), the paired difference."""
    play = {"random_legal": agent.random_trajectory, "teacher": agent.expert_trajectory}
    players = {p: common.scripted_result(p, [(s, fn(s, cfg["size"])) for s in seeds]) for p, fn in play.items()}
    return {"metrics": common.baseline_figures(players, METRICS, trained["metrics"] if trained else None)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from art_train import LocalBackend

    cfg = common.settings(CONFIGS, args)
    base_model = common.base_model_path(cfg["base_model"])
    t_start = time.perf_counter()
    seed, size = args.seed, cfg["size"]
    held_out = common.held_out_seeds(args.split, cfg["eval_puzzles"])
    backend = LocalBackend(path=args.output, device=cfg["device"])
    model = common.trainable_model("temporal-clue", args, base_model)
    stages: dict[str, art.EvalResult] = {}
    curve: list[dict[str, float]] = []
    try:
        await model.register(backend)
        client = model.openai_client()

        async def stage(name: str) -> None:
            stages[name] = await evaluate(model, await model.get_step(), held_out, size, client)
            logger.info("%s: %s", name, stages[name].summary())

        await stage("base")
        expert = [agent.expert_trajectory(s, size) for s in common.sft_seeds(seed, cfg["sft_puzzles"])]
        await model.train_sft(expert, common.sft_config(cfg))
        await stage("sft")
        for step in range(cfg["rl_steps"]):
            seeds = common.rl_seeds(seed, step, cfg["groups"])
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(agent.rollout(model, s, size=size, temperature=cfg["rl_temperature"], client=client)
                                     for _ in range(cfg["group_size"])) for s in seeds),
                pbar_desc=f"rl step {step + 1}", max_exceptions=0)
            metrics = art.group_metrics(groups)
            result = await model.train(groups, config=common.rl_config(cfg))
            curve.append({"step": result.step, "reward": metrics["reward_mean"]})
            logger.info("rl step %d: train reward %.3f", step + 1, metrics["reward_mean"])
            if common.curve_scores_held_out(cfg, step):
                held = await evaluate(model, result.step, held_out, size, client)  # the RL curve, held out
                curve[-1]["held_out"] = common.curve_point(held)
                logger.info("rl step %d: held-out %s", step + 1, held.summary())
        await stage("sft_rl")
    finally:
        await backend.close()
    wall = time.perf_counter() - t_start
    out = {**common.run_entry("temporal_clue", cfg, args, model, wall),
           "eval": {"puzzles": len(held_out), "greedy": True, "seeds": f"{held_out[0]}..{held_out[-1]}"},
           "metrics": common.figures(stages, METRICS), "curve": curve}
    played = await baselines(cfg, held_out, {"metrics": stages["sft_rl"]})
    out["baselines"] = common.baselines_block(held_out, PLAYERS, played, HEADLINE)
    if args.record:
        common.record(Path(args.record), "temporal_clue", out)
    for name, r in stages.items():
        print(f"{name} (step {r.step}): " + common.figures_line(out["metrics"], name))
    common.print_comparisons(stages, wall, out["peak_rss_mb"])
    common.print_baselines(out["baselines"])
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    int_settings = ("size", "sft_puzzles", "sft_epochs", "sft_batch", "rl_steps", "groups", "group_size",
                    "eval_puzzles", "eval_every")
    return common.parse_args(__doc__, CONFIGS, int_settings, argv)


if __name__ == "__main__":
    common.setup_logging()
    asyncio.run(main(parse_args()))
