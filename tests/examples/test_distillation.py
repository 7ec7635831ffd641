"""examples/distillation/train.py: the teacher's wrong replies are dropped, training questions are never
held out, and a tiny run (tiny teacher, tiny student) records every stage and the teacher."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import art_core as art
from examples.distillation import train as distill

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "distillation" / "train.py"


def test_training_questions_are_disjoint_and_never_held_out():
    held = {q.id for split in ("test", "dev") for q in distill.ADDITION.splits[split]}
    for seed in (0, 1):
        teach, rl = distill.training_questions(seed, 256, 64)
        ids = [q.id for q in teach + rl]
        assert len(teach) == 256 and len(rl) == 64 and len(set(ids)) == 320
        assert not set(ids) & held
    assert distill.training_questions(0, 8, 8) != distill.training_questions(1, 8, 8)


def test_only_replies_with_the_reward_are_kept():
    q1, q2 = distill.ADDITION.splits["train"][:2]

    def reply(text: str, q: distill.Question) -> art.Trajectory:
        reward = distill.ADDITION.score(q, text, "stop")
        return art.Trajectory(messages=[*distill.ADDITION.messages(q), {"role": "assistant", "content": text}],
                              reward=reward)  # fmt: skip

    groups = [art.TrajectoryGroup([reply(str(q1.answer), q1), reply("12", q1)]),
              art.TrajectoryGroup([reply("I think 3", q2)])]  # fmt: skip
    kept, stats = distill.keep([q1, q2], groups, min_reward=1.0)
    assert kept == [[*distill.ADDITION.messages(q1), {"role": "assistant", "content": str(q1.answer)}]]
    assert stats == {"questions": 2, "replies": 3, "kept": 1, "teacher_train_accuracy": pytest.approx(1 / 3)}
    assert len(distill.keep([q1, q2], groups, min_reward=0.0)[0]) == 3


@pytest.mark.slow
def test_tiny_run_records_every_stage_and_the_teacher(tmp_path):
    record = tmp_path / "examples.json"
    out = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--rl-steps", "2", "--eval-every", "1", "--output",
                          str(tmp_path / "run"), "--record", str(record)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    entry = json.loads(record.read_text())["distillation"]["tiny[rl_steps=2,eval_every=1]-seed0"]
    assert entry["eval"]["stage_steps"] == {"base": 0, "sft": 1, "sft_rl": 3}
    # --eval-every 1: the held-out curve after each RL step but the last (that one is the sft_rl stage)
    assert [c["step"] for c in entry["curve"]] == [2, 3] and "held_out" not in entry["curve"][1]
    assert 0.0 <= entry["curve"][0]["held_out"]["mean"] <= 1.0
    assert entry["distill"]["replies"] == entry["distill"]["kept"] == entry["sft"]["examples"] == 8
    row = entry["held_out"]["accuracy"]
    for stage in ("base", "sft", "sft_rl"):
        low, high = row[stage]["ci"]
        assert 0.0 <= low <= row[stage]["mean"] <= high <= 1.0
    for diff in ("sft_minus_base", "sft_rl_minus_base", "sft_rl_minus_sft"):
        assert row[diff]["ci"][0] <= row[diff]["diff"] <= row[diff]["ci"][1]
    teacher = entry["baselines"]["held_out"]["accuracy"]
    assert 0.0 <= teacher["teacher"]["mean"] <= 1.0 and "trained_minus_teacher" in teacher
    assert "teacher: accuracy " in out.stdout and "sft_rl vs sft (held-out accuracy)" in out.stdout


@pytest.mark.slow
def test_a_teacher_with_no_right_answer_stops_the_run_with_the_reason(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--min-reward", "1", "--output", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode != 0
    assert "the teacher got none of 8 training questions right" in out.stderr
