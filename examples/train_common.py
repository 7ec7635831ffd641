"""What the game examples' train.py scripts share: seeds, settings, the figures and the results file.

Used by examples/{tictactoe,game_2048,codenames,temporal_clue}/train.py. Each script keeps its own
CONFIGS, stages, rollouts and metrics; this module holds only what is the same in all four.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import resource
import tempfile
from pathlib import Path
from typing import Any

import art_core as art

# first seed of each evaluation split; the training seeds (sft_seeds, rl_seeds) stay below 50_000 for --seed 0..2
SPLITS = {"test": 100_000, "dev": 50_000}


def settings(configs: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The chosen configuration with any setting given on the command line put over it."""
    return {**configs[args.config], **{k: v for k, v in vars(args).items() if k in configs["cpu"] and v is not None}}


def base_model_path(base_model: str) -> str:
    """The model to load: "tiny" is a random tiny model built once in the temp folder."""
    if base_model != "tiny":
        return base_model
    from art_train.models import build_tiny_model

    return str(build_tiny_model(Path(tempfile.gettempdir()) / "art-example-tiny"))


def trainable_model(project: str, args: argparse.Namespace, base_model: str) -> art.TrainableModel:
    """The run's model, named `<project>-<config>-s<seed>`."""
    return art.TrainableModel(name=f"{project}-{args.config}-s{args.seed}", project=project, base_model=base_model,
                              config=art.ModelConfig(max_seq_len=512, seed=args.seed))


def held_out_seeds(split: str, count: int) -> list[int]:
    """The first `count` game seeds of an evaluation split."""
    first = SPLITS[split]
    return list(range(first, first + count))


def sft_seeds(seed: int, count: int) -> range:
    """The seeds of the SFT warm-up's expert games."""
    return range(seed * 10_000, seed * 10_000 + count)


def rl_seeds(seed: int, step: int, groups: int) -> range:
    """The seeds of one RL step's groups (one seed per group)."""
    first = 20_000 + seed * 10_000
    return range(first + step * groups, first + (step + 1) * groups)


def sft_config(cfg: dict[str, Any]) -> art.SFTConfig:
    return art.SFTConfig(learning_rate=cfg["sft_lr"], num_epochs=cfg["sft_epochs"], batch_size=cfg["sft_batch"],
                         max_seq_len=512)


def rl_config(cfg: dict[str, Any]) -> art.TrainConfig:
    return art.TrainConfig(learning_rate=cfg["rl_lr"], max_seq_len=512)


def curve_scores_held_out(cfg: dict[str, Any], step: int) -> bool:
    """Whether the RL curve scores the held-out tasks after RL step `step` (0-based): every
    `cfg["eval_every"]` steps (0: never), but not after the last, which the `sft_rl` stage scores."""
    every = cfg.get("eval_every", 0)
    return bool(every) and (step + 1) % every == 0 and step + 1 < cfg["rl_steps"]


def curve_point(result: art.EvalResult) -> dict[str, Any]:
    """A held-out score as the RL curve stores it."""
    return {"mean": result.mean, "ci": list(result.ci)}


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


def scripted_result(player: str, games: list[tuple[int, art.Trajectory]]) -> art.EvalResult:
    """A scripted player's games (held-out seed, scored trajectory) as an `art.EvalResult`, so its
    means and intervals come from the same bootstrap as the model's (`EvalResult.ci`, seed 0)."""
    groups = [art.TrajectoryGroup([t], metadata={"task_id": str(s)}) for s, t in games]
    return art.EvalResult.from_groups(groups, model=player, step=None)


def baseline_figures(players: dict[str, art.EvalResult], keys: dict[str, str | None],
                     trained: art.EvalResult | None = None) -> dict[str, Any]:
    """Each metric's mean and 95% interval per scripted player; with the trained model's results on
    the same games, the paired difference SFT+RL - random legal (`art.compare`)."""
    out: dict[str, Any] = {}
    for name, key in keys.items():
        res = {p: by_metric(r, key) for p, r in players.items()}
        row: dict[str, Any] = {p: {"mean": r.mean, "ci": list(r.ci)} for p, r in res.items()}
        if trained is not None:
            c = art.compare(res["random_legal"], by_metric(trained, key))
            row["sft_rl_minus_random_legal"] = {"diff": c.diff, "ci": list(c.ci), "p_value": c.p_value,
                                                "method": "paired"}
        out[name] = row
    return out


def baselines_block(seeds: list[int], players: dict[str, str], groups: dict[str, dict[str, Any]],
                    headline: str) -> dict[str, Any]:
    """A run's `baselines` entry: the games, what each player does, its figures per table, and the
    headline difference SFT+RL - random legal (`headline` names the table whose score it is)."""
    score = groups[headline]["score"]
    return {"games": len(seeds), "seeds": f"{seeds[0]}..{seeds[-1]}", "players": players, **groups,
            "headline": {"table": headline, "metric": "score", **score.get("sft_rl_minus_random_legal", {})}}


def print_baselines(block: dict[str, Any]) -> None:
    """The scripted players' figures on the headline table, then SFT+RL - random legal."""
    head = block["headline"]
    for player in block["players"]:
        print(f"{player}: " + figures_line(block[head["table"]], player))
    if "diff" in head:
        low, high = head["ci"]
        print(f"SFT+RL - random legal ({head['table']} {head['metric']}, {head['method']}): "
              f"{head['diff']:+.3f} [{low:+.3f}, {high:+.3f}]")


def config_name(cfg: dict[str, Any], args: argparse.Namespace) -> str:
    """`--config` and the settings given on the command line, as results files key a run:
    "cpu[rl_steps=16,eval_every=4]" (a run with other settings never replaces the configuration's own)."""
    given = [f"{k}={getattr(args, k)}" for k in cfg if getattr(args, k, None) is not None]
    return f"{args.config}[{','.join(given)}]" if given else str(args.config)


def run_entry(example: str, cfg: dict[str, Any], args: argparse.Namespace, model: art.TrainableModel,
              wall: float) -> dict[str, Any]:
    """The fields every example's results entry starts with; the script adds its evaluation and figures."""
    return {"example": example, "model": cfg["base_model"], "config": config_name(cfg, args), "settings": cfg,
            "seed": args.seed, "split": args.split, "project": model.project, "name": model.name,
            "steps": {"sft": 1, "rl": cfg["rl_steps"]}, "wall_s": round(wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def machine() -> dict[str, Any]:
    """What the run's wall time depends on: CPU model and count, torch's kernels, native bfloat16, GPU."""
    import torch

    from art_train.models import cpu_has_native_bf16

    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]  # fmt: skip
    return {"cpu": names[0] if names else platform.processor(), "cpus": os.cpu_count(),
            "capability": torch.backends.cpu.get_cpu_capability(), "native_bf16": cpu_has_native_bf16(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}  # fmt: skip


def record(path: Path, example: str, entry: dict[str, Any]) -> None:
    """Add or replace this run's entry (keyed by configuration and seed) in the shared results file,
    with the machine it ran on (`machine`) unless the entry names one."""
    entry = {**entry, "machine": entry.get("machine") or machine()}
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault(example, {})[f"{entry['config']}-seed{entry['seed']}"] = entry
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def figures_line(table: dict[str, Any], stage: str) -> str:
    """One stage's metrics as `name mean [low, high]`, comma separated."""
    return ", ".join(f"{m} {t[stage]['mean']:.3f} [{t[stage]['ci'][0]:.3f}, {t[stage]['ci'][1]:.3f}]"
                     for m, t in table.items())


def print_comparisons(stages: dict[str, art.EvalResult], wall: float, peak_rss_mb: int) -> None:
    """The paired tables base vs SFT+RL and SFT vs SFT+RL, then the wall time and peak RSS."""
    print(art.compare(stages["base"], stages["sft_rl"]).table())
    print(art.compare(stages["sft"], stages["sft_rl"]).table())
    print(f"wall {wall:.0f} s, peak RSS {peak_rss_mb} MB")


def parse_args(doc: str | None, configs: dict[str, dict[str, Any]], int_settings: tuple[str, ...],
               argv: list[str] | None) -> argparse.Namespace:
    """The command line: --config, --seed, --output, --split, --record, then a flag per setting."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(configs), default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=".art-examples", help="run-directory root")
    p.add_argument("--split", choices=sorted(SPLITS), default="test",
                   help="evaluate on the held-out test seeds, or on the dev seeds used for choosing settings")
    p.add_argument("--record", help="add the run's figures to this JSON file (benchmarks/results/examples.json)")
    for key in int_settings:
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int)
    for key in ("sft_lr", "rl_lr", "rl_temperature"):
        p.add_argument(f"--{key.replace('_', '-')}", dest=key, type=float)
    p.add_argument("--base-model", dest="base_model")
    return p.parse_args(argv)


def setup_logging() -> None:
    """INFO logs with a timestamp, without httpx's line per request."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("httpx", "httpx2"):  # openai and langchain-openai may log through httpx2
        logging.getLogger(name).setLevel(logging.WARNING)
