"""The LangGraph example: its teacher and task splits, and a whole run (tiny random model) as a user runs it."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "langgraph_agent"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch):
    """examples/langgraph_agent/train.py imported the way the script runs (its folder on sys.path)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import train  # type: ignore[import-not-found]

    return train


def test_teacher_runs_the_real_graph_and_is_right_on_every_task(example) -> None:
    tasks = example.make_tasks(12, seed=3)
    trajectories = asyncio.run(example.teacher_trajectories(tasks))
    assert [t.reward for t in trajectories] == [1.0] * 12
    t = trajectories[0]
    researcher, writer = t.histories()
    calls = [m["tool_calls"][0]["function"]["name"] for m in researcher.messages() if m.get("tool_calls")]
    assert calls == ["multiply", "add"]
    assert {tool["function"]["name"] for tool in researcher.tools} == {"add", "multiply"}
    assert writer.tools is None and writer.messages()[-1]["content"] == f"The answer is {int(tasks[0][1])}."
    assert t.metadata["capture"]["nodes"] == {"researcher": 3, "writer": 1}


def test_held_out_tasks_are_never_training_tasks(example) -> None:
    held_out = example.heldout_tasks(64, seed=0)
    train = example.training_tasks(200, seed=0, held_out=held_out)
    assert len({q for q, _ in held_out}) == 64 and len(train) == 200
    assert not {q for q, _ in held_out} & {q for q, _ in train}
    for q, e in held_out[:5]:  # a rows of b apples, and c more: a * b + c
        a, b, c = (int(n) for n in re.findall(r"\d+", q)[:3])
        assert e == a * b + c


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
    assert result["step"] == 2  # the SFT step, then one RL step
    assert result["llm_calls"] >= 8  # 4 rollouts x (researcher + writer) at least
    assert result["turns_without_token_ids"] == 0
    assert set(result["accuracy"]) >= {"base", "sft", "sft_rl", "sft_rl_minus_base", "sft_rl_minus_sft"}
    run_dir = tmp_path / "examples" / "models" / "langgraph-agent"
    assert sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir()) == [0, 1, 2]
    sft_log, rl_log = sorted((run_dir / "trajectories" / "train").iterdir())
    assert sft_log.name == "0001.jsonl" and "multiply" in sft_log.read_text()  # the teacher's games, logged
    logged = rl_log
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
