"""`art demo` end to end on the tiny model: the per-step history, the run directory and the PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from art_train.demo import brevity_reward, demo


def test_brevity_reward() -> None:
    assert brevity_reward("Paris.", "stop") == 1.0
    assert brevity_reward("The capital is Paris.", "stop") == pytest.approx(1 - 1 / 27)
    assert brevity_reward(" ".join(["word"] * 40), "stop") == 0.0
    assert brevity_reward("Paris", "length") == 0.0  # cut off by max_tokens
    assert brevity_reward("  ", "stop") == 0.0  # saying nothing is not an answer


@pytest.mark.slow
async def test_demo_runs_two_steps(tiny_model_path: Path, tmp_path: Path) -> None:
    history = await demo(steps=2, output=tmp_path, base_model=str(tiny_model_path), groups=2, group_size=3,
                         lr=1e-3, seed=0)
    assert [h["step"] for h in history] == [1, 2]
    assert all(0.0 <= h["reward"] <= 1.0 and h["seconds"] > 0 for h in history)
    assert (tmp_path / "reward.png").stat().st_size > 1000
    (run,) = (tmp_path / ".art" / "demo" / "models").iterdir()
    assert (run / "checkpoints" / "0002" / "adapter_config.json").exists()
    rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} >= {1, 2}
    groups = [json.loads(line) for line in (run / "trajectories" / "train" / "0001.jsonl").read_text().splitlines()]
    assert [len(g["trajectories"]) for g in groups] == [3, 3]  # 2 questions x 3 rollouts, written before training
