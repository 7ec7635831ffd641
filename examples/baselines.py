"""Baselines for the game runs already recorded: a random legal player and the scripted teacher.

    python -m examples.baselines                      # every game run in benchmarks/results/examples.json
    python -m examples.baselines tictactoe codenames  # some games

For each recorded run it plays the run's held-out games (the seeds and settings in its entry) with
each example's `train.baselines`, and writes them under the run's "baselines" key. Runs recorded
before train.py played the baselines itself keep only the trained model's means and intervals, not
its per-game scores, so SFT+RL - random legal cannot be paired: its interval is the difference of the
two intervals' ends ("method": "interval ends"), wider than an unpaired bootstrap. A run recorded
since carries the paired difference ("method": "paired") and is left as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

from examples import train_common as common

GAMES = ("tictactoe", "game_2048", "codenames", "temporal_clue")
RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "examples.json"


def interval_difference(trained: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """`trained - baseline` from two means and intervals: low - high to high - low."""
    return {"diff": trained["mean"] - baseline["mean"],
            "ci": [trained["ci"][0] - baseline["ci"][1], trained["ci"][1] - baseline["ci"][0]],
            "method": "interval ends"}


def seeds_of(entry: dict[str, Any]) -> list[int]:
    """The run's held-out seeds, from its `eval` record ("100000..100199")."""
    first, last = (int(x) for x in entry["eval"]["seeds"].split(".."))
    return list(range(first, last + 1))


def baselines_for(example: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The `baselines` entry of one recorded run, with SFT+RL - random legal from its recorded figures."""
    train = importlib.import_module(f"examples.{example}.train")
    seeds = seeds_of(entry)
    groups = asyncio.run(train.baselines(entry["settings"], seeds))
    for table, rows in groups.items():
        for metric, row in rows.items():
            trained = entry[table].get(metric, {}).get("sft_rl")
            if trained is not None:
                row["sft_rl_minus_random_legal"] = interval_difference(trained, row["random_legal"])
    return common.baselines_block(seeds, train.PLAYERS, groups, train.HEADLINE)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("games", nargs="*", help=f"games (default: all of {', '.join(GAMES)})")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if set(args.games) - set(GAMES):
        p.error(f"not a game example: {', '.join(sorted(set(args.games) - set(GAMES)))}")
    data = json.loads(args.results.read_text())
    for example in args.games or GAMES:
        for run, entry in sorted(data.get(example, {}).items()):
            if entry.get("baselines", {}).get("headline", {}).get("method") == "paired":
                continue  # recorded by train.py with the per-game scores: keep the paired figures
            entry["baselines"] = baselines_for(example, entry)
            head = entry["baselines"]["headline"]
            print(f"{example} {run}: SFT+RL - random legal ({head['table']} score) {head['diff']:+.3f} "
                  f"[{head['ci'][0]:+.3f}, {head['ci'][1]:+.3f}]")
    args.results.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
