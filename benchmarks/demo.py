"""`bash scripts/demo.sh` (the README's first command) on a fresh clone: wall time, peak RSS, held-out numbers.

For each seed: `git clone <repo> <clones>/demo-clone-<seed>`, build its .venv with `bash scripts/setup.sh`
(timed, not part of the demo's budget), then time `bash scripts/demo.sh --seed <seed>` under
`/usr/bin/time -v` (the demo script runs setup.sh again, which is then quick). ART_CACHE points into the
clone, so the one-time conversion of smollm2-135m is inside the measured demo, as on a fresh machine.
Results (task, steps, wall time, peak RSS, held-out base and trained means with 95% CIs, the paired
difference with its CI, seed) go to benchmarks/results/demo.json, one entry per seed.

Usage (run under the shared lock; about 10 minutes a seed plus the venv builds):
    flock /tmp/art-heavy.lock python benchmarks/demo.py --repo /work/main --seeds 0 1 [--skip-setup]
Smoke (seconds): `python benchmarks/demo.py --smoke [--out PATH]`: no clone and no setup; `art demo` from this
checkout with this interpreter on the tiny model, 1 step of 2 x 2 rollouts, seed 0, same timing and parsing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "demo.json"
TARGET_DIFFERENCE = 0.25  # the demo's target: held-out trained - base, on the 0/1 metric


def run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("w") as f:
        subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def smoke_seed(seed: int) -> dict:
    """`art demo` as the benchmark times it, from this checkout on the tiny model (1 step of 2 x 2 rollouts)."""
    from _smoke import tiny_model

    work = Path(tempfile.mkdtemp(prefix="art-smoke-demo-"))
    cli = ["art_train.cli", "demo", "--model", tiny_model(), "--steps", "1", "--groups", "2", "--group-size", "2"]
    command = [sys.executable, "-m", *cli, "--seed", str(seed), "--output", str(work / "art-demo")]
    env = {**os.environ, "ART_HOME": str(work / "home"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    wall = run(["/usr/bin/time", "-v", *command], Path(__file__).resolve().parents[1], env, work / "demo.log")
    return record(work / "demo.log", work / "art-demo", wall, seed, "smoke (this checkout)", None,
                  "python -m " + " ".join(cli))


def record(log_path: Path, output: Path, wall: float, seed: int, commit: str, setup_s: float | None,
           command: str) -> dict:
    """One seed's entry: the demo's own summary, the wall time and /usr/bin/time's peak RSS."""
    log = log_path.read_text(errors="replace")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log).group(1))
    summary = json.loads((output / "demo.json").read_text())
    c = summary["comparison"]
    return {
        "seed": seed, "commit": commit, "task": summary["task"], "steps": summary["steps"],
        "groups": summary["groups"], "group_size": summary["group_size"], "learning_rate": summary["learning_rate"],
        "temperature": summary["temperature"],
        "held_out_split": summary["eval_split"], "held_out_questions": summary["held_out_questions"],
        "command": f"{command} --seed {seed}",
        "wall_s": round(wall, 1), "demo_internal_wall_s": summary["wall_s"], "setup_s": None if setup_s is None else round(setup_s, 1),
        "peak_rss_mb": round(rss_kb / 1024),
        "base": {"mean": summary["base"]["mean"], "ci": summary["base"]["ci"]},
        "trained": {"step": summary["trained"]["step"], "mean": summary["trained"]["mean"], "ci": summary["trained"]["ci"]},
        "difference": {"mean": c["diff"], "ci": c["ci"], "p_value": c["p_value"]},
        "training_reward_first_last": [summary["history"][0]["reward"], summary["history"][-1]["reward"]],
    }


def one_seed(repo: str, clones: Path, seed: int, skip_setup: bool) -> dict:
    clone = clones / f"demo-clone-{seed}"
    if clone.exists() and not skip_setup:
        shutil.rmtree(clone)  # a fresh clone of the repo's HEAD every time, never an older one
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", repo, str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    env = {**os.environ, "ART_CACHE": str(clone / ".art-cache")}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    setup_s = None
    if not skip_setup:
        setup_s = run(["bash", "scripts/setup.sh"], clone, env, clone / "setup.log")
    output = clone / "art-demo"
    wall = run(["/usr/bin/time", "-v", "bash", "scripts/demo.sh", "--seed", str(seed), "--output", str(output)],
               clone, env, clone / "demo.log")
    return record(clone / "demo.log", output, wall, seed, commit, setup_s, "bash scripts/demo.sh")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default="/work/main")
    parser.add_argument("--clones", default="/tmp")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--skip-setup", action="store_true", help="the clones' .venv is already built")
    parser.add_argument("--smoke", action="store_true",
                        help="no clone: this checkout, tiny model, 1 step, seed 0; to --out or a temp file")
    parser.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    args = parser.parse_args()
    out_path = args.out or RESULTS
    if args.smoke:
        from _smoke import smoke_out

        out_path, args.seeds = smoke_out(args.out, "demo.json"), [0]
    doc = json.loads(out_path.read_text()) if out_path.exists() else {}
    runs = {r["seed"]: r for r in doc.get("runs", [])}
    for seed in args.seeds:
        runs[seed] = smoke_seed(seed) if args.smoke else one_seed(args.repo, Path(args.clones), seed, args.skip_setup)
        print(json.dumps(runs[seed], indent=2), flush=True)
    ordered = [runs[s] for s in sorted(runs)]
    doc = {
        "benchmark": "bash scripts/demo.sh on a fresh clone (2 shared CPU cores)" if not args.smoke
                     else "smoke: art demo on the tiny model from this checkout (figures mean nothing)",
        "target": f"trained - base >= +{TARGET_DIFFERENCE} on the held-out 0/1 metric, difference CI above 0, "
                  "within 10 minutes",
        "runs": ordered,
        "median": {
            "wall_s": statistics.median(r["wall_s"] for r in ordered),
            "difference": statistics.median(r["difference"]["mean"] for r in ordered),
            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in ordered),
        },
        "met": all(r["difference"]["mean"] >= TARGET_DIFFERENCE and r["difference"]["ci"][0] > 0 and r["wall_s"] <= 600
                   for r in ordered),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
