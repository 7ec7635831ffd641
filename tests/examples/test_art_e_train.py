"""examples/art_e/train.py runs end to end (base -> SFT -> RL, each evaluated) on a random tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_smoke_on_the_tiny_model(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "examples.art_e.train", "--config", "tiny", "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    stages = results["stages"]
    assert list(stages) == ["base", "sft", "rl"]
    # base is step 0; SFT trained one checkpoint per batch (4 examples in batches of 2); RL one step more
    assert stages["base"]["step"] == 0 and stages["sft"]["step"] == 2 and stages["rl"]["step"] == 3
    assert all(s["questions"] == 3 and 0.0 <= s["accuracy"] <= 1.0 for s in stages.values())
    assert set(results["differences"]) == {"sft-base", "rl-base", "rl-sft"}
    assert results["sft"]["examples"] == 4 and results["rl"]["steps"] == 1
    # the teacher's data was written and checked on load; held-out runs were logged as split val
    assert sum(1 for _ in (tmp_path / "teacher.jsonl").open()) >= 15
    val = tmp_path / "art" / "art-e" / "models" / "art-e-tiny-s0" / "trajectories" / "val"
    assert sorted(p.name for p in val.iterdir()) == ["0000.jsonl", "0002.jsonl", "0003.jsonl"]


def test_results_hold_every_stage_measured_so_far():
    """train.py writes results.json after each stage: one stage has no differences; three have all three."""
    import art_core as art
    from examples.art_e.train import summarise

    def result(step, rewards):
        return art.EvalResult(model=f"m@{step}", step=step, task_ids=[f"q{i}" for i in range(len(rewards))],
                              rewards=[[r] for r in rewards]), 0.0  # fmt: skip

    out: dict = {}
    stages = {"base": result(0, [0, 0, 0, 1])}
    assert summarise(out, stages, 1.0) == {} and out["differences"] == {}
    assert out["stages"]["base"]["accuracy"] == 0.25 and json.dumps(out)  # writable as it stands
    stages |= {"sft": result(2, [1, 0, 1, 1]), "rl": result(3, [1, 1, 1, 1])}
    compared = summarise(out, stages, 2.0)
    assert set(compared) == set(out["differences"]) == {"sft-base", "rl-base", "rl-sft"}
    assert out["differences"]["rl-base"]["diff"] == 0.75 and out["wall_s"] == 2.0
    # the shape every example records (benchmarks/examples_table.py): the RL stage is "sft_rl" there
    acc = out["accuracy"]
    assert acc["sft_rl"]["mean"] == 1.0 and acc["sft_rl_minus_base"]["diff"] == 0.75
    assert acc["sft_rl_minus_sft"]["diff"] == out["differences"]["rl-sft"]["diff"] == 0.25


def test_boolean_settings_parse_true_and_false_and_refuse_anything_else(capsys):
    """`--rl-scale-rewards false` turns std scaling off (a plain bool() would read "false" as True)."""
    from examples.art_e.train import parse_args

    assert parse_args(["--rl-scale-rewards", "false"]).rl_scale_rewards is False
    assert parse_args(["--rl-scale-rewards", "Yes"]).rl_scale_rewards is True
    assert parse_args([]).rl_scale_rewards is None  # the configuration's value stands
    with pytest.raises(SystemExit):
        parse_args(["--rl-scale-rewards", "maybe"])
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err
