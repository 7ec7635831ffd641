"""The LangGraph example trains end to end (tiny random model, one step) as a user would run it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_example_trains_one_step(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "examples/langgraph_agent/train.py",
        "--tiny",
        "--steps",
        "1",
        "--groups",
        "2",
        "--rollouts",
        "2",
        "--max-tokens",
        "8",
        "--per-node",
        "--home",
        str(tmp_path),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert result["step"] == 1
    assert result["llm_calls"] >= 8  # 4 rollouts x (researcher + writer) at least
    assert result["turns_without_token_ids"] == 0
    run_dir = tmp_path / "examples" / "models" / "langgraph-agent"
    assert sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir()) == [0, 1]
    (logged,) = (run_dir / "trajectories" / "train").iterdir()
    groups = [json.loads(line) for line in logged.read_text().splitlines()]
    nodes = {
        m["sample"]["node"]
        for g in groups
        for t in g["trajectories"]
        for h in [t, *t["additional_histories"]]
        for m in h["messages"]
        if "sample" in m
    }
    assert nodes == {"researcher", "writer"}  # per-node groups: each node trained on its own reward
