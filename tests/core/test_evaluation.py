"""`evaluate`, `compare` and `PeriodicEval` with rollouts whose rewards are known in advance.

The backend here is a small in-memory one that keeps the run directory like the real service does
(`log` writes trajectories/<split>/<step>.jsonl and a history row); the real engines are exercised
in tests/train/test_trainability.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import art_core as art
from art_core.evaluation import sample_seed
from art_core.metrics import group_metrics


class RunDirBackend:
    """Just enough of a Backend for evaluation: a step counter and `log` into a RunDir."""

    def __init__(self, root: Path, step: int = 0) -> None:
        self.root, self.step = root, step

    async def register(self, model: art.Model) -> art.Registration:
        return art.Registration(base_url="http://127.0.0.1:1/v1", served_name=model.name, step=self.step)

    async def get_step(self, model: art.Model) -> int:
        return self.step

    async def log(self, model: art.Model, groups: list[art.TrajectoryGroup], split: str, step: int | None) -> dict:
        run = art.RunDir(model.project, model.name, self.root)
        step = self.step if step is None else step
        run.write_trajectories(split, step, groups)
        metrics = group_metrics(groups)
        run.append_history({"step": step, "split": split, **metrics})
        return metrics


async def trainable(tmp_path: Path, step: int = 0) -> tuple[art.TrainableModel, RunDirBackend]:
    backend = RunDirBackend(tmp_path, step)
    model = art.TrainableModel(name="agent", project="p", base_model="tiny")
    await model.register(backend)  # type: ignore[arg-type]
    return model, backend


def traj(reward: float, **metadata: Any) -> art.Trajectory:
    return art.Trajectory(messages=[{"role": "user", "content": "q"}], reward=reward, metadata=metadata)


async def test_scores_mean_and_pass_at_k_on_known_rewards(tmp_path: Path) -> None:
    model, _ = await trainable(tmp_path)

    async def rollout(model: art.Model, task: int, seed: int) -> art.Trajectory:
        # even tasks always right; task 1 right on its first sample only; the rest never
        return traj(float(task % 2 == 0 or (task == 1 and seed == sample_seed(0, 1, 0))))

    result = await art.evaluate(model, rollout, list(range(6)), k=4, show_progress=False)
    assert result.task_ids == ["0", "1", "2", "3", "4", "5"]
    assert result.scores == [1.0, 0.25, 1.0, 0.0, 1.0, 0.0]
    assert result.mean == pytest.approx(3.25 / 6)
    low, high = result.ci
    assert 0 <= low < result.mean < high <= 1
    assert result.binary
    assert result.pass_at(4) == pytest.approx(4 / 6)  # tasks 0, 1, 2, 4 have a correct sample
    assert result.pass_at(1) == pytest.approx(result.mean)  # pass@1 is the fraction correct
    m = result.metrics()
    assert m["val/reward_mean"] == result.mean and m["val/pass@4"] == pytest.approx(4 / 6)
    assert (m["val/tasks"], m["val/samples"], m["val/exceptions"]) == (6, 24, 0)


async def test_pins_the_checkpoint_and_seeds_every_sample(tmp_path: Path) -> None:
    model, backend = await trainable(tmp_path, step=5)
    seen: list[tuple[str, int]] = []

    async def rollout(model: art.Model, task: str, seed: int) -> art.Trajectory:
        seen.append((model.served_name(), seed))
        return traj(0.5)

    await art.evaluate(model, rollout, ["a", "b"], k=3, seed=7, show_progress=False)
    assert {name for name, _ in seen} == {"agent@5"}  # newest by default, pinned for the whole pass
    assert sorted(s for _, s in seen) == sorted(sample_seed(7, i, j) for i in range(2) for j in range(3))
    assert len({s for _, s in seen}) == 6

    seen.clear()
    await art.evaluate(model, rollout, ["a", "b"], k=3, seed=7, step=0, show_progress=False)
    assert {name for name, _ in seen} == {"agent@0"}
    assert model.served_name() == "agent"  # the caller's model is not changed


async def test_prompted_model_needs_no_backend_and_has_no_steps() -> None:
    model = art.Model(name="gpt", inference_model_name="gpt-4.1-mini", inference_base_url="http://x/v1")

    async def rollout(model: art.Model, task: int) -> art.Trajectory:  # no seed argument: allowed
        assert model.served_name() == "gpt-4.1-mini"
        return traj(task / 10)

    result = await art.evaluate(model, rollout, [1, 2, 3], show_progress=False)
    assert result.model == "gpt-4.1-mini" and result.step is None
    assert result.mean == pytest.approx(0.2)
    assert not result.binary and result.pass_at() is None and "val/pass@1" not in result.metrics()
    with pytest.raises(ValueError, match="not trainable"):
        await art.evaluate(model, rollout, [1], step=3)


async def test_concurrency_is_bounded(tmp_path: Path) -> None:
    model, _ = await trainable(tmp_path)
    running, peak = 0, 0

    async def rollout(model: art.Model, task: int) -> art.Trajectory:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return traj(1.0)

    await art.evaluate(model, rollout, list(range(10)), k=2, max_concurrency=3, show_progress=False)
    assert peak == 3


async def test_writes_the_val_split_to_the_run_directory(tmp_path: Path) -> None:
    model, backend = await trainable(tmp_path, step=2)

    async def rollout(model: art.Model, task: dict) -> art.Trajectory:
        return traj(task["answer"])

    tasks = [{"id": "x", "answer": 1.0}, {"id": "y", "answer": 0.0}]
    result = await art.evaluate(model, rollout, tasks, k=2, task_id=lambda t: t["id"], show_progress=False)
    run = art.RunDir("p", "agent", tmp_path)
    assert (run.path / "trajectories" / "val" / "0002.jsonl").exists()
    (row,) = run.read_history("val")
    assert (row["split"], row["step"], row["reward_mean"], row["trajectories"]) == ("val", 2, 0.5, 4)
    assert run.metrics_by_step("val")[2]["val/reward_mean"] == 0.5
    # the written groups rebuild the same result: task ids, k and seed travel in the group metadata
    again = art.EvalResult.from_groups(run.read_trajectories("val", 2))
    assert (again.task_ids, again.scores, again.k, again.step, again.model) == (["x", "y"], [1.0, 0.0], 2, 2, "agent@2")
    assert again.ci == result.ci

    await art.evaluate(model, rollout, tasks, log=False, show_progress=False)
    assert len(run.read_history("val")) == 1


async def test_failed_rollouts_are_left_out_not_scored_zero(tmp_path: Path) -> None:
    model, _ = await trainable(tmp_path)

    async def rollout(model: art.Model, task: int, seed: int) -> art.Trajectory:
        if task == 2 or (task == 1 and seed == sample_seed(0, 1, 0)):
            raise RuntimeError("tool server down")
        return traj(1.0)

    with pytest.raises(art.TooManyExceptions):
        await art.evaluate(model, rollout, [0, 1, 2], k=2, show_progress=False)
    result = await art.evaluate(model, rollout, [0, 1, 2], k=2, max_exceptions=3, show_progress=False)
    assert result.task_ids == ["0", "1"] and result.failed_tasks == ["2"]
    assert result.rewards == [[1.0, 1.0], [1.0]] and result.mean == 1.0 and result.exceptions == 3


def fixed(model: str, scores: dict[str, float]) -> art.EvalResult:
    return art.EvalResult(model=model, step=None, task_ids=list(scores), rewards=[[v] for v in scores.values()])


def test_paired_comparison_with_a_known_answer() -> None:
    # tasks differ a lot in difficulty, but the trained model is better by exactly 0.25 on each:
    # the paired difference is 0.25 with a zero-width interval, while the means' own intervals overlap
    base_scores = {f"t{i}": s for i, s in enumerate([0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.75] * 2)}
    base = fixed("m@0", base_scores)
    trained = fixed("m@9", {t: s + 0.25 for t, s in base_scores.items()})
    c = art.compare(base, trained)
    assert c.diff == pytest.approx(0.25)
    assert c.ci == pytest.approx((0.25, 0.25))
    assert c.p_value == pytest.approx(1 / 10_001)  # 16 pairs: Monte Carlo; no sign pattern reaches |0.25|
    assert base.ci[1] > trained.ci[0]  # unpaired, the intervals overlap
    table = c.table()
    assert "difference (paired)" in table and "+0.250" in table and "m@0" in table and "m@9" in table


def test_paired_comparison_exact_p_value_and_interval() -> None:
    # differences +1, +1, +1, +1, 0: exact sign-flip test, |sum| >= 4 only for the 2 x 2 patterns
    # that keep all four ones the same sign (the zero's sign is free): p = 4 / 32
    base = fixed("a", {t: 0.0 for t in "vwxyz"})
    other = fixed("b", {"v": 1.0, "w": 1.0, "x": 1.0, "y": 1.0, "z": 0.0})
    c = art.compare(base, other)
    assert c.diff == pytest.approx(0.8)
    assert c.p_value == pytest.approx(4 / 32)
    low, high = c.ci
    assert low == pytest.approx(0.4) and high == pytest.approx(1.0)  # resamples have 0..5 ones of 5 -> 0.4 at 2.5%
    assert c.to_dict()["tasks"] == 5


def test_comparison_pairs_by_task_id_and_refuses_disjoint_results() -> None:
    base = fixed("a", {"x": 0.0, "y": 1.0, "only-a": 1.0})
    other = fixed("b", {"y": 1.0, "x": 1.0})
    c = art.compare(base, other)
    assert c.task_ids == ["x", "y"] and c.diffs == [1.0, 0.0]
    assert (c.base_mean, c.other_mean) == (0.5, 1.0)
    with pytest.raises(ValueError, match="share no task ids"):
        art.compare(base, fixed("c", {"z": 1.0}))


async def test_periodic_eval_runs_at_step_zero_and_every_n(tmp_path: Path) -> None:
    model, backend = await trainable(tmp_path)
    calls: list[str] = []

    async def rollout(model: art.Model, task: int) -> art.Trajectory:
        calls.append(model.served_name())
        return traj(float(backend.step >= 2))

    val = art.PeriodicEval(rollout, [0, 1], every=2, show_progress=False)
    assert (await val(model)).mean == 0.0  # step 0
    results = []
    for step in (1, 2, 3):
        backend.step = step
        result = art.TrainResult(step=step, metrics={"loss": 0.1})
        results.append(result)
        await val(model, result)
    assert "val/reward_mean" not in results[0].metrics and "val/reward_mean" not in results[2].metrics
    assert results[1].metrics["val/reward_mean"] == 1.0 and results[1].metrics["loss"] == 0.1
    await val(model, results[2], force=True)
    assert results[2].metrics["val/reward_mean"] == 1.0
    assert sorted(val.results) == [0, 2, 3] and val.last is val.results[3]
    assert calls == ["agent@0"] * 2 + ["agent@2"] * 2 + ["agent@3"] * 2
    rows = art.RunDir("p", "agent", tmp_path).read_history("val")
    assert [r["step"] for r in rows] == [0, 2, 3]
    assert art.compare(val.results[0], val.last).diff == 1.0
