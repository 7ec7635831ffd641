"""Train a small model to play Tic Tac Toe: SFT warm-up on minimax games, then GRPO.

    python examples/tictactoe/train.py                 # CPU: smollm2-135m, under 20 minutes on 2 cores
    python examples/tictactoe/train.py --config gpu    # the same recipe, bigger, on a CUDA GPU
    python examples/tictactoe/train.py --config tiny   # a random tiny model: a smoke run in seconds

Stages: the base model, SFT on games the minimax player plays in the agent's seat against the random
opponent, then GRPO against the random opponent (groups share a game seed: same side, same opponent
dice). Each stage is evaluated on held-out game seeds it never trained on, against the random
opponent and against the minimax player (where a draw is the best possible).
"""

from __future__ import annotations

import argparse
import asyncio
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

logger = logging.getLogger("tictactoe")

CONFIGS: dict[str, dict[str, Any]] = {
    # every figure below was picked on the dev seeds (50_000+), never on the held-out ones (100_000+)
    "cpu": dict(base_model="smollm2-135m", sft_games=400, sft_epochs=2, sft_lr=3e-4, rl_steps=10, groups=8,
                group_size=6, rl_lr=1e-4, eval_games=200, minimax_games=100, device=None),
    "gpu": dict(base_model="smollm2-135m", sft_games=2000, sft_epochs=2, sft_lr=3e-4, rl_steps=40, groups=16,
                group_size=8, rl_lr=1e-4, eval_games=500, minimax_games=200, device="cuda"),
    "tiny": dict(base_model="tiny", sft_games=8, sft_epochs=1, sft_lr=1e-3, rl_steps=1, groups=2,
                 group_size=2, rl_lr=1e-4, eval_games=4, minimax_games=2, device=None),
}
SPLITS = {"test": 100_000, "dev": 50_000}  # first game seed of each evaluation split; training stays below


async def evaluate(model: art.TrainableModel, seeds: list[int], opponent: str) -> list[art.Trajectory]:
    """Greedy games on the given seeds against `opponent` (the newest checkpoint)."""
    client = model.openai_client()
    return await art.gather_trajectories(
        (agent.rollout(model, s, opponent=opponent, temperature=0.0, client=client) for s in seeds),
        pbar_desc=f"eval vs {opponent}", max_exceptions=0)


def summary(trajs: list[art.Trajectory]) -> dict[str, float]:
    n = len(trajs)
    moves = sum(t.metrics["moves"] for t in trajs)
    return {"score": sum(t.reward for t in trajs) / n,
            **{f"{k}_rate": sum(t.metrics[k] for t in trajs) / n for k in ("win", "draw", "loss", "illegal")},
            "illegal_per_move": sum(t.metrics["illegal"] for t in trajs) / max(moves, 1)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from art_train import LocalBackend

    cfg = {**CONFIGS[args.config], **{k: v for k, v in vars(args).items() if k in CONFIGS["cpu"] and v is not None}}
    base_model = cfg["base_model"]
    if base_model == "tiny":
        from art_train.models import build_tiny_model

        base_model = str(build_tiny_model(Path(tempfile.gettempdir()) / "art-example-tiny"))
    t_start = time.perf_counter()
    seed = args.seed
    first = SPLITS[args.split]
    held_out = list(range(first, first + cfg["eval_games"]))
    held_out_minimax = held_out[: cfg["minimax_games"]]
    backend = LocalBackend(path=args.output, device=cfg["device"])
    model = art.TrainableModel(name=f"tictactoe-s{seed}", project="tictactoe", base_model=base_model,
                               config=art.ModelConfig(max_seq_len=512, seed=seed))
    stages: dict[str, dict[str, Any]] = {}
    curve: list[dict[str, float]] = []
    try:
        await model.register(backend)

        async def stage(name: str) -> None:
            vs_random = await evaluate(model, held_out, "random")
            vs_minimax = await evaluate(model, held_out_minimax, "minimax")
            stages[name] = {"step": await model.get_step(), "random": vs_random, "minimax": vs_minimax}
            logger.info("%s: vs random %s | vs minimax %s", name, summary(vs_random), summary(vs_minimax))

        await stage("base")
        # SFT warm-up: minimax plays the agent's seat; seeds 0.. (shifted by the run seed)
        sft_seeds = range(seed * 10_000, seed * 10_000 + cfg["sft_games"])
        expert = [await agent.expert_trajectory(s) for s in sft_seeds]
        await model.train_sft(expert, art.SFTConfig(learning_rate=cfg["sft_lr"], num_epochs=cfg["sft_epochs"],
                                                    batch_size=8, max_seq_len=512))
        await stage("sft")
        client = model.openai_client()
        rl_seed = 20_000 + seed * 10_000
        for step in range(cfg["rl_steps"]):
            seeds = range(rl_seed + step * cfg["groups"], rl_seed + (step + 1) * cfg["groups"])
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(agent.rollout(model, s, client=client) for _ in range(cfg["group_size"]))
                 for s in seeds), pbar_desc=f"rl step {step + 1}", max_exceptions=0)
            metrics = art.group_metrics(groups)
            result = await model.train(groups, config=art.TrainConfig(learning_rate=cfg["rl_lr"], max_seq_len=512))
            curve.append({"step": result.step, "reward": metrics["reward_mean"],
                          "illegal": metrics.get("metric/illegal", 0.0)})
            logger.info("rl step %d: train reward %.3f, illegal %.3f", step + 1, metrics["reward_mean"],
                        curve[-1]["illegal"])
        await stage("sft_rl")
    finally:
        await backend.close()
    wall = time.perf_counter() - t_start
    out = {"config": args.config, "cfg": cfg, "seed": seed, "wall_s": wall,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "curve": curve,
           "stages": {k: {"step": v["step"], "random": summary(v["random"]), "minimax": summary(v["minimax"]),
                          "rewards_random": [t.reward for t in v["random"]],
                          "rewards_minimax": [t.reward for t in v["minimax"]]} for k, v in stages.items()}}
    if args.results:
        Path(args.results).write_text(json.dumps(out, indent=1))
    for name, v in out["stages"].items():
        print(f"{name}: step {v['step']} vs random {json.dumps(v['random'])} vs minimax {json.dumps(v['minimax'])}")
    print(f"wall {wall:.0f} s, peak RSS {out['peak_rss_mb']:.0f} MB")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=".art-examples", help="run-directory root")
    p.add_argument("--split", choices=sorted(SPLITS), default="test",
                   help="evaluate on the held-out test seeds, or on the dev seeds used for choosing settings")
    p.add_argument("--results", help="write the run's figures to this JSON file")
    for key in ("sft_games", "sft_epochs", "rl_steps", "groups", "group_size", "eval_games", "minimax_games"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int)
    for key in ("sft_lr", "rl_lr"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=float)
    p.add_argument("--base-model", dest="base_model")
    return p.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(main(parse_args()))
