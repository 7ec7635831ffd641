"""Train a small model to play Codenames in both roles: SFT warm-up on scripted play, then GRPO.

    python examples/codenames/train.py                 # CPU: smollm2-135m, under 20 minutes on 2 cores
    python examples/codenames/train.py --config gpu    # the same recipe, bigger, on a CUDA GPU
    python examples/codenames/train.py --config tiny   # a random tiny model: a smoke run in seconds

Stages: the base model, SFT on games of the scripted spymaster and operative, then GRPO with the
model in both roles. A game gives one spymaster and one operative trajectory; the games of one board
form two groups, one per role, so advantages compare spymasters with spymasters. Each stage is
evaluated greedily on held-out boards, each role beside a fixed scripted partner.
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

logger = logging.getLogger("codenames")

CONFIGS: dict[str, dict[str, Any]] = {
    # settings chosen on the dev seeds (50_000+), never on the held-out ones (100_000+)
    "cpu": dict(base_model="smollm2-135m", sft_games=300, sft_epochs=2, sft_lr=3e-4, rl_steps=10, groups=8,
                group_size=6, rl_lr=1e-4, eval_boards=200, device=None),
    "gpu": dict(base_model="smollm2-135m", sft_games=2000, sft_epochs=2, sft_lr=3e-4, rl_steps=40, groups=16,
                group_size=8, rl_lr=1e-4, eval_boards=500, device="cuda"),
    "tiny": dict(base_model="tiny", sft_games=4, sft_epochs=1, sft_lr=1e-3, rl_steps=1, groups=2, group_size=2,
                 rl_lr=1e-4, eval_boards=4, device=None),
}
SPLITS = {"test": 100_000, "dev": 50_000}  # first board seed of each evaluation split; training stays below
ROLES = ("spymaster", "operative")


async def evaluate(model: art.TrainableModel, seeds: list[int], role: str) -> list[art.Trajectory]:
    """Greedy games with the model in `role` beside the scripted partner."""
    client = model.openai_client()

    async def one(seed: int) -> art.Trajectory:
        out = await agent.rollout_pair(model, seed, roles=(role,), temperature=0.0, client=client)
        return out[role]

    return await art.gather_trajectories((one(s) for s in seeds), pbar_desc=f"eval {role}", max_exceptions=0)


def summary(trajs: list[art.Trajectory]) -> dict[str, float]:
    n = len(trajs)
    return {"score": sum(t.reward for t in trajs) / n,
            **{f"{k}_rate": sum(t.metrics[k] for t in trajs) / n for k in ("assassin", "illegal_clue", "invalid_guess")},
            "mean_margin": sum(t.metrics["margin"] for t in trajs) / n}


async def train_groups(model: art.TrainableModel, seeds: range, group_size: int, client: Any) -> list[art.TrajectoryGroup]:
    """Group_size games per board with the model in both roles; one group per role per board."""
    groups = []
    for games in await asyncio.gather(*(
            asyncio.gather(*(agent.rollout_pair(model, s, client=client) for _ in range(group_size)))
            for s in seeds)):
        for role in ROLES:
            trajs = [g[role] for g in games if g.get(role) is not None]
            if len(trajs) > 1:
                groups.append(art.TrajectoryGroup(trajs, metadata={"role": role}))
    return groups


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
    held_out = list(range(first, first + cfg["eval_boards"]))
    backend = LocalBackend(path=args.output, device=cfg["device"])
    model = art.TrainableModel(name=f"codenames-s{seed}", project="codenames", base_model=base_model,
                               config=art.ModelConfig(max_seq_len=512, seed=seed))
    stages: dict[str, dict[str, Any]] = {}
    curve: list[dict[str, float]] = []
    try:
        await model.register(backend)

        async def stage(name: str) -> None:
            stages[name] = {"step": await model.get_step(),
                            **{role: await evaluate(model, held_out, role) for role in ROLES}}
            logger.info("%s: %s", name, {role: summary(stages[name][role]) for role in ROLES})

        await stage("base")
        sft_seeds = range(seed * 10_000, seed * 10_000 + cfg["sft_games"])
        expert = [t for s in sft_seeds for t in await agent.expert_game(s)]
        await model.train_sft(expert, art.SFTConfig(learning_rate=cfg["sft_lr"], num_epochs=cfg["sft_epochs"],
                                                    batch_size=8, max_seq_len=512))
        await stage("sft")
        client = model.openai_client()
        rl_seed = 20_000 + seed * 10_000
        for step in range(cfg["rl_steps"]):
            seeds = range(rl_seed + step * cfg["groups"], rl_seed + (step + 1) * cfg["groups"])
            groups = await train_groups(model, seeds, cfg["group_size"], client)
            row = {role: art.group_metrics([g for g in groups if g.metadata["role"] == role])["reward_mean"]
                   for role in ROLES}
            result = await model.train(groups, config=art.TrainConfig(learning_rate=cfg["rl_lr"], max_seq_len=512))
            curve.append({"step": result.step, **{f"{r}_reward": v for r, v in row.items()}})
            logger.info("rl step %d: %s", step + 1, curve[-1])
        await stage("sft_rl")
    finally:
        await backend.close()
    wall = time.perf_counter() - t_start
    out = {"config": args.config, "cfg": cfg, "seed": seed, "wall_s": wall,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "curve": curve,
           "stages": {k: {"step": v["step"],
                          **{role: {**summary(v[role]), "rewards": [t.reward for t in v[role]]} for role in ROLES}}
                      for k, v in stages.items()}}
    if args.results:
        Path(args.results).write_text(json.dumps(out, indent=1))
    for name, v in out["stages"].items():
        print(f"{name}: step {v['step']} spymaster {v['spymaster']['score']:.3f} operative {v['operative']['score']:.3f}")
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
    for key in ("sft_games", "sft_epochs", "rl_steps", "groups", "group_size", "eval_boards"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int)
    for key in ("sft_lr", "rl_lr"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=float)
    p.add_argument("--base-model", dest="base_model")
    return p.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(main(parse_args()))
