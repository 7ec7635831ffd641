"""Zero-data AutoRL on MCP servers nobody here wrote: verified tasks, SFT on gold runs, RL, on CPU.

    bash examples/autorl/setup_servers.sh        # the servers: mcp-server-time (PyPI), server-memory (npm)
    python examples/autorl/train.py --server time --seed 0 --record benchmarks/results/examples.json
    python examples/autorl/train.py --server memory --seed 1
    python examples/autorl/train.py --server time --config tiny   # a random tiny model: a smoke run

Each run is `art autorl` with no judge and no dataset (docs/mcp.md, "Verified AutoRL"): tasks sampled
from the server's tool schemas and checked against gold runs in fresh copies of the server; the
model as it ships (base), after SFT on the training tasks' gold runs (sft), then after GRPO steps on
the checked rewards (sft_rl). Training tasks come from gold walks of `--seed`; held-out tasks from
walks of the split's own seed (test 100000, dev 50000), any that equals a training task dropped, so
no held-out task was trained on. The servers run over stdio exactly as published:

- time: `mcp-server-time` from PyPI (the MCP project's Python reference server). Its
  `get_current_time` reads the clock, so only `convert_time` makes tasks (``--tools``); the answer
  must hold the converted times, weekdays and offset it returns.
- memory: `@modelcontextprotocol/server-memory` from npm (the Node reference knowledge-graph
  server), one memory file per server process. Creating entities and relations are state tasks
  (the graph read back with `read_graph` must equal the gold run's), reads and deletes answer tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/, for train_common
import train_common as common  # noqa: E402

SERVERS_DIR = Path(os.environ.get("ART_AUTORL_SERVERS", HERE / ".servers"))
SERVERS: dict[str, dict[str, Any]] = {
    "time": {"package": "mcp-server-time==2026.10.19 (PyPI)", "tools": "convert_time", "max_seq_len": 1024,
             "isolation": "shared",  # convert_time keeps no state: one server process serves every rollout
             "program": "venv/bin/mcp-server-time", "command": "{program} --local-timezone UTC",
             "cpu": dict(sft_epochs=1, concurrency=16)},
    "memory": {"package": "@modelcontextprotocol/server-memory@2026.8.31 (npm)", "tools": None, "max_seq_len": 2048,
               "isolation": "per_rollout",
               "program": "node/node_modules/.bin/mcp-server-memory",
               "command": "env MEMORY_FILE_PATH={{rollout_dir}}/memory.jsonl {program}",
               "cpu": dict(train_tasks=32, eval_tasks=16, sft_epochs=1, rl_steps=2, concurrency=16, max_processes=16)},
}  # fmt: skip
# Each server's "cpu" entry above changes these cpu settings to fit 30 minutes; chosen on the dev split.
CONFIGS: dict[str, dict[str, Any]] = {
    # examples/mcp_rl's cpu settings, fixed before the first measured run; never tuned on the test split
    "cpu": dict(base_model="smollm2-135m", train_tasks=40, eval_tasks=24, sft_epochs=2, sft_batch=4, sft_lr=5e-4,
                rl_steps=3, tasks_per_step=4, group_size=4, rl_lr=2e-5, max_turns=3, max_tokens=192, concurrency=8,
                max_processes=4),
    # a random tiny model: checks the whole pipeline, learns nothing
    "tiny": dict(base_model="tiny", train_tasks=4, eval_tasks=2, sft_epochs=1, sft_batch=2, sft_lr=1e-3,
                 rl_steps=1, tasks_per_step=2, group_size=2, rl_lr=2e-5, max_turns=2, max_tokens=12, concurrency=8,
                 max_processes=4),
}  # fmt: skip


def server_command(server: str) -> str:
    """The server's command line; exits with the fix when setup_servers.sh has not installed it."""
    program = SERVERS_DIR / SERVERS[server]["program"]
    if not program.exists():
        sys.exit(f"{program} is missing: install the servers with `bash examples/autorl/setup_servers.sh` "
                 f"(or point ART_AUTORL_SERVERS at a folder it filled)")  # fmt: skip
    return SERVERS[server]["command"].format(program=program)


def autorl_argv(server: str, cfg: dict[str, Any], args: argparse.Namespace, out: Path) -> list[str]:
    """The `art autorl` command line of this run."""
    spec = SERVERS[server]
    argv = [
        "--mcp", server_command(server), "--base-model", common.base_model_path(cfg["base_model"]),
        "--num-tasks", str(cfg["train_tasks"] + cfg["eval_tasks"]),
        "--val-fraction", str(cfg["eval_tasks"] / (cfg["train_tasks"] + cfg["eval_tasks"])),
        "--val-seed", str(common.SPLITS[args.split]), "--seed", str(args.seed),
        "--sft-epochs", str(cfg["sft_epochs"]), "--sft-batch-size", str(cfg["sft_batch"]),
        "--sft-learning-rate", str(cfg["sft_lr"]), "--steps", str(cfg["rl_steps"]),
        "--tasks-per-step", str(cfg["tasks_per_step"]), "--group-size", str(cfg["group_size"]),
        "--learning-rate", str(cfg["rl_lr"]), "--max-turns", str(cfg["max_turns"]),
        "--max-tokens", str(cfg["max_tokens"]), "--max-seq-len", str(spec["max_seq_len"]),
        "--concurrency", str(cfg["concurrency"]), "--max-processes", str(cfg["max_processes"]),
        "--isolation", spec["isolation"],
        "--project", "autorl-examples", "--name", f"{server}-{args.config}-s{args.seed}", "--output", str(out),
    ]  # fmt: skip
    return argv + (["--tools", spec["tools"]] if spec["tools"] else [])


def entry(server: str, cfg: dict[str, Any], args: argparse.Namespace, report: dict[str, Any], wall: float,
          argv: list[str]) -> dict[str, Any]:  # fmt: skip
    """The run's results entry in the examples' shape: `verified_reward` by stage and difference."""
    reward: dict[str, Any] = {k: {"mean": v["mean"], "ci": v["ci"]} for k, v in report["stages"].items()}
    for name, d in report["differences"].items():
        b, a = name.split(" - ")
        reward[f"{b}_minus_{a}"] = {"diff": d["diff"], "ci": d["ci"], "p_value": d.get("p_value")}
    return {"example": "autorl", "server": SERVERS[server]["package"], "model": cfg["base_model"],
            "config": f"{server}-{args.config}" + (f"[{','.join(args.set)}]" if args.set else ""), "settings": cfg,
            "seed": args.seed, "split": args.split,
            "verified_reward": reward, "tasks": report["tasks"], "sft": report["sft"], "curve": report["history"],
            "steps": {"sft": 1 if report["sft"] else 0, "rl": cfg["rl_steps"]}, "wall_s": round(wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "command": "art autorl " + " ".join(argv)}  # fmt: skip


def _setting(text: str, config: dict[str, Any]) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or key not in config:
        sys.exit(f"--set {text!r}: give KEY=VALUE with a KEY of the config: {', '.join(sorted(config))}")
    return key, type(config[key])(value)


def settings(server: str, config: str, changes: list[str]) -> dict[str, Any]:
    """The run's settings: the config, the server's own changes to `cpu`, then each KEY=VALUE."""
    own = SERVERS[server]["cpu"] if config == "cpu" else {}
    return {**CONFIGS[config], **own, **dict(_setting(kv, CONFIGS[config]) for kv in changes)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", choices=sorted(SERVERS), required=True)
    p.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=sorted(common.SPLITS), default="test",
                   help="held-out tasks from the test walks, or the dev walks used for choosing settings")
    p.add_argument("--output", help="run folder (default: a temporary one)")
    p.add_argument("--record", help="add the run's figures to this JSON file (benchmarks/results/examples.json)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting of --config (e.g. --set sft_epochs=1), for dev-split runs")
    args = p.parse_args(argv)
    from art_train.cli import autorl

    cfg = settings(args.server, args.config, args.set)
    out = Path(args.output or tempfile.mkdtemp(prefix=f"autorl-{args.server}-"))
    run_argv = autorl_argv(args.server, cfg, args, out)
    t0 = time.time()
    if autorl(run_argv) != 0:
        sys.exit(f"art autorl failed; its output is above, its files in {out}")
    report = json.loads((out / "report.json").read_text())
    result = entry(args.server, cfg, args, report, time.time() - t0, run_argv)
    if args.record:
        common.record(Path(args.record), result["example"], result)
    print(json.dumps({k: result[k] for k in ("example", "seed", "verified_reward", "wall_s")}, indent=1))
    return result


if __name__ == "__main__":
    main()
