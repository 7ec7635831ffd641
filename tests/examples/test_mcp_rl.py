"""examples/mcp_rl/train_calculator.py: held-out tasks never trained on, and a tiny run end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import art_core as art
from examples.mcp_rl import train_calculator as calc

ROOT = Path(__file__).resolve().parents[2]


def test_train_dev_and_test_tasks_share_no_task():
    test = {t.expression for t in calc.heldout_tasks("test", 400)}
    dev = {t.expression for t in calc.heldout_tasks("dev", 400)}
    train: set[str] = set()
    for config in calc.CONFIGS.values():
        for seed in (0, 1, 2):
            train |= {t.expression for t in calc.sft_tasks(seed, config["sft_tasks"])}
            for step in range(config["rl_steps"]):
                train |= {t.expression for t in calc.rl_tasks(seed, step, config["tasks_per_step"])}
    assert len(test) > 300 and len(dev) > 300 and len(train) > 50
    assert not test & dev and not test & train and not dev & train
    # the held-out tasks are fixed: the same list for every run, whatever its --seed
    assert calc.heldout_tasks("test", 40) == calc.heldout_tasks("test", 40)
    assert all(eval(t.expression) == t.answer for t in calc.heldout_tasks("test", 40))  # noqa: S307 - a*b+c


def test_accuracy_takes_the_last_number_and_the_reward_gives_partial_credit():
    def traj(answer: str, calls: list[dict] | None = None) -> art.Trajectory:
        return art.Trajectory(messages=[], metadata={"final_answer": answer, "mcp_calls": calls or []})

    assert calc.correct(traj("45 * 12 + 7 = 547"), 547) == 1.0
    assert calc.correct(traj("547, or maybe 548"), 547) == 0.0  # the last number is the answer
    assert calc.reward(traj("1,547"), 1547) == 1.0
    # a miss by 10%: 0.5 * (1 - 0.1); with a successful `calculate` call, 0.2 more
    assert calc.reward(traj("90"), 100) == pytest.approx(0.45)
    used = [{"name": "calculate", "is_error": False}]
    assert calc.reward(traj("90", used), 100) == pytest.approx(0.65)
    assert calc.reward(traj("no idea"), 100) == 0.0


@pytest.mark.slow
def test_tiny_run_records_every_stage_with_intervals_and_differences(tmp_path):
    record = tmp_path / "examples.json"
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_rl" / "train_calculator.py"), "--tiny", "--eval-tasks", "3",
         "--output", str(tmp_path / "run"), "--record", str(record)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    recorded = json.loads(record.read_text())["mcp_rl"]["tiny[eval_tasks=3]-seed0"]
    assert recorded.pop("machine")["cpus"] >= 1 and results == recorded  # the record adds the machine it ran on
    # base is step 0, one train_sft call makes step 1, one RL step step 2
    assert results["eval"]["stage_steps"] == {"base": 0, "sft": 1, "sft_rl": 2}
    assert results["eval"]["tasks"] == 3 and results["split"] == "test" and results["seed"] == 0
    for metric in ("accuracy", "shaped_reward"):
        row = results[metric]
        for stage in ("base", "sft", "sft_rl"):
            low, high = row[stage]["ci"]
            assert 0.0 <= low <= row[stage]["mean"] <= high <= 1.0
        for diff in ("sft_minus_base", "sft_rl_minus_base", "sft_rl_minus_sft"):
            low, high = row[diff]["ci"]
            assert low <= row[diff]["diff"] <= high and 0.0 <= row[diff]["p_value"] <= 1.0
    assert results["sft"]["examples"] == 4 and len(results["curve"]) == 1
    assert results["wall_s"] > 0 and results["peak_rss_mb"] > 0 and results["settings"]["eval_tasks"] == 3
    assert "sft_rl vs base (held-out accuracy)" in out.stdout and "sft_rl: accuracy " in out.stdout
    checkpoints = tmp_path / "run" / "mcp-rl" / "models" / "calculator-tiny-s0" / "checkpoints"
    assert (checkpoints / "0002").is_dir()
