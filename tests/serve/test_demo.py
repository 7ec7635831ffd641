"""`art demo` and `art eval` end to end on the tiny model, and the demo tasks' rewards and splits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from art_train.cli import main
from art_train.demo import demo
from art_train.demo_tasks import addition_questions, addition_reward, brevity_reward
from art_train.tasksets import TaskSet, add_task_set, load_task_set


def test_brevity_reward() -> None:
    assert brevity_reward("Paris.", "stop") == 1.0
    assert brevity_reward("The capital is Paris.", "stop") == pytest.approx(1 - 1 / 27)
    assert brevity_reward(" ".join(["word"] * 40), "stop") == 0.0
    assert brevity_reward("Paris", "length") == 0.0  # cut off by max_tokens
    assert brevity_reward("  ", "stop") == 0.0  # saying nothing is not an answer


def test_addition_reward_checks_the_last_number() -> None:
    assert addition_reward("68", 68) == 1.0
    assert addition_reward("23 + 45 = 68.", 68) == 1.0
    assert addition_reward("The answer is 1,068", 1068) == 1.0
    assert addition_reward("68? No, 69", 68) == 0.0
    assert addition_reward("sixty-eight", 68) == 0.0
    assert addition_reward("", 68) == 0.0


def test_addition_splits_are_disjoint_and_fixed() -> None:
    splits = addition_questions()
    assert [len(splits[s]) for s in ("test", "dev", "train")] == [64, 64, 4095 - 128]

    def unordered(split: str) -> set[tuple[int, int]]:
        return {tuple(sorted(map(int, q.id.split("+")))) for q in splits[split]}  # type: ignore[misc]

    assert not unordered("test") & unordered("train")  # neither 23 + 45 nor 45 + 23 of a test pair is trained
    assert not unordered("dev") & unordered("train") and not unordered("dev") & unordered("test")
    assert all(q.answer == sum(map(int, q.id.split("+"))) for q in splits["test"])
    assert addition_questions()["test"] == splits["test"]  # fixed by SPLIT_SEED, whatever the demo's seed


def test_task_sets_are_registered_and_loadable(tmp_path: Path) -> None:
    addition = load_task_set("addition")
    assert len(addition.tasks()) == 64 and len(addition.tasks("dev")) == 64
    with pytest.raises(ValueError, match="no split 'train'"):
        addition.tasks("train")  # training questions are never an evaluation split
    file = tmp_path / "mytasks.py"
    file.write_text(
        "from art_train.tasksets import TaskSet\n"
        "async def rollout(model, task, seed):\n    raise NotImplementedError\n"
        "def tasks():\n    return TaskSet('mine', rollout=rollout, splits={'test': [1, 2, 3]})\n")
    assert load_task_set(f"{file}:tasks").tasks() == [1, 2, 3]
    with pytest.raises(ValueError, match="unknown task set"):
        load_task_set("nope")
    add_task_set("test-registered", lambda: TaskSet("x", rollout=None, splits={"test": [7]}))  # type: ignore[arg-type]
    assert load_task_set("test-registered").tasks() == [7]


@pytest.mark.slow
async def test_demo_and_art_eval_on_the_tiny_model(tiny_model_path: Path, tmp_path: Path) -> None:
    summary = await demo(steps=2, output=tmp_path, base_model=str(tiny_model_path), groups=2, group_size=3,
                         lr=1e-3, seed=0, eval_size=6)
    assert [h["step"] for h in summary["history"]] == [1, 2]
    assert all(0.0 <= h["reward"] <= 1.0 and h["seconds"] > 0 for h in summary["history"])
    # held out: step 0 and the last step on the same 6 test questions, compared pair by pair
    assert summary["base"]["step"] == 0 and summary["trained"]["step"] == 2
    assert list(summary["base"]["scores"]) == [q.id for q in addition_questions()["test"][:6]]
    c = summary["comparison"]
    assert c["tasks"] == 6 and c["diff"] == pytest.approx(c["other_mean"] - c["base_mean"])
    assert c["ci"][0] <= c["diff"] <= c["ci"][1] and 0 < c["p_value"] <= 1
    assert json.loads((tmp_path / "demo.json").read_text())["comparison"] == c
    assert (tmp_path / "reward.png").stat().st_size > 1000

    run = Path(summary["run_dir"])
    assert (run / "checkpoints" / "0002" / "adapter_config.json").exists()
    rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("kind") == "grpo"] == [1, 2]
    assert [(r["step"], r["trajectories"]) for r in rows if r.get("split") == "val"] == [(0, 6), (2, 6)]
    groups = [json.loads(line) for line in (run / "trajectories" / "train" / "0001.jsonl").read_text().splitlines()]
    assert [len(g["trajectories"]) for g in groups] == [3, 3]  # 2 questions x 3 rollouts, written before training
    assert (run / "trajectories" / "val" / "0000.jsonl").exists() and (run / "trajectories" / "val" / "0002.jsonl").exists()

    # art eval on the same run (its own event loop, as from the shell): step 2 asked for, step 0 added as the
    # reference; decoding is greedy, so the demo's held-out scores come out again
    out = tmp_path / "eval"
    assert await asyncio.to_thread(main, ["eval", str(run), "--steps", "2", "--output", str(out)]) == 0
    doc = json.loads((out / "eval.json").read_text())
    assert sorted(doc["steps"]) == ["0", "2"] and doc["tasks"] == "addition"  # the task set from the run's metadata
    assert {q: doc["steps"]["2"]["scores"][q] for q in summary["trained"]["scores"]} == summary["trained"]["scores"]
    assert doc["comparisons"]["2"]["tasks"] == 64
    assert (out / "eval.png").stat().st_size > 1000
    # no such checkpoint: a clear error and exit status 2, not a traceback
    assert await asyncio.to_thread(main, ["eval", str(run), "--steps", "7"]) == 2
