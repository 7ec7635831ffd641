"""Markdown tables of the example runs in benchmarks/results/examples.json (for the READMEs).

    python benchmarks/examples_table.py                 # every example and run
    python benchmarks/examples_table.py tictactoe       # one example
    python benchmarks/examples_table.py --smoke         # every committed run renders (counts to --out)

Each run gets one row per metric: the stages' means with 95% intervals, then the paired differences
(SFT+RL - base, SFT+RL - SFT) with theirs, then the run's wall time and peak RSS. A run with
`baselines` (examples/baselines.py, or a teacher model's figures) also shows the players it names (a
random legal player, the teacher) and its paired differences (SFT+RL - random legal, trained - teacher).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "examples.json"
STAGES = ("base", "sft", "sft_rl")
DIFFS = ("sft_rl_minus_base", "sft_rl_minus_sft")
PLAYERS = {"random_legal": "random legal", "teacher": "teacher"}
BASELINE_DIFFS = {"sft_rl_minus_random_legal": "SFT+RL - random legal", "trained_minus_teacher": "trained - teacher"}


def _interval(cell: dict[str, Any], key: str, sign: bool) -> str:
    fmt = "{:+.3f}" if sign else "{:.3f}"
    low, high = cell["ci"]
    return f"{fmt.format(cell[key])} [{fmt.format(low)}, {fmt.format(high)}]"


def tables(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The entry's figure tables: `{group: {metric: {stage: {...}}}}`; a bare metric is its own group."""
    out: dict[str, dict[str, Any]] = {}
    for group, value in entry.items():
        if not isinstance(value, dict):
            continue
        if _is_row(value):
            out.setdefault("", {})[group] = value
        elif value and all(isinstance(v, dict) and _is_row(v) for v in value.values()):
            out[group] = value
    return out


def _is_row(value: dict[str, Any]) -> bool:
    """A metric's row: stages keyed by name, each with a mean (other blocks, like ART-E's `stages`, are not).
    A run started from another's SFT checkpoint (`--init-from`) has no base stage: its row still counts."""
    return any(isinstance(value.get(s), dict) and "mean" in value[s] for s in STAGES)


def markdown(example: str, run: str, entry: dict[str, Any]) -> str:
    baselines = entry.get("baselines") or {}
    rows = [m for g in baselines.values() if isinstance(g, dict) for m in g.values() if isinstance(m, dict)]
    players = [p for p in PLAYERS if any(p in m for m in rows)]  # the columns some metric fills
    diffs = [d for d in BASELINE_DIFFS if any(d in m for m in rows)]
    head = "| metric | base | SFT | SFT + RL | SFT+RL - base | SFT+RL - SFT |"
    head += "".join(f" {PLAYERS[p]} |" for p in players) + "".join(f" {BASELINE_DIFFS[d]} |" for d in diffs)
    lines = [f"### {example} {run} ({entry.get('model')}, wall {entry.get('wall_s', 0) / 60:.1f} min, "
             f"peak RSS {entry.get('peak_rss_mb', 0) / 1024:.1f} GB)", "", head, "|---" * (head.count("|") - 1) + "|"]
    for group, metrics in tables(entry).items():
        for name, row in metrics.items():
            cells = [_interval(row[s], "mean", False) if s in row else "-" for s in STAGES]
            cells += [_interval(row[d], "diff", True) if d in row else "-" for d in DIFFS]
            played = baselines.get(group, {}).get(name, {})
            cells += [_interval(played[p], "mean", False) if p in played else "-" for p in players]
            cells += [_interval(played[d], "diff", True) if d in played else "-" for d in diffs]
            lines.append(f"| {f'{group} ' if group else ''}{name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("examples", nargs="*", help="example names (default: all)")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--smoke", action="store_true",
                   help="render every run of the committed examples.json and examples_dev.json; write the "
                        "counts of runs and metric rows to --out or a temp file")
    p.add_argument("--out", type=Path, default=None, help="the smoke run's JSON")
    args = p.parse_args(argv)
    if args.smoke:
        smoke(args.out)
        return
    data = json.loads(args.results.read_text())
    for example in args.examples or sorted(data):
        for run, entry in sorted(data[example].items()):
            print(markdown(example, run, entry), end="\n\n")  # noqa: T201 - a report


def smoke(out: Path | None) -> None:
    """Every committed run renders; the counts of runs and metric rows go to `out` (default: a temp file)."""
    from _smoke import smoke_out

    counts: dict[str, Any] = {"runs": 0, "rows": 0, "files": [], "runs_without_rows": []}
    for results in (RESULTS, RESULTS.with_name("examples_dev.json")):
        data = json.loads(results.read_text())
        counts["files"].append(results.name)
        for example in sorted(data):
            for run, entry in sorted(data[example].items()):
                rows = sum(line.startswith("| ") and not line.startswith("| metric |") for line in
                           markdown(example, run, entry).splitlines())
                counts["runs"] += 1
                counts["rows"] += rows
                if rows == 0:  # e.g. art_e_ruler's judge runs: figures, but no stage table
                    counts["runs_without_rows"].append(f"{example} {run}")
    if counts["rows"] == 0:
        raise SystemExit("no committed run renders a metric row: the table no longer reads examples.json")
    path = smoke_out(out, "examples_table.json")
    path.write_text(json.dumps(counts, indent=2) + "\n")
    print(json.dumps(counts))  # noqa: T201 - a report


if __name__ == "__main__":
    main()
