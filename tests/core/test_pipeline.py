"""`PipelineTrainer` against a fake backend: rollouts overlap training, never beyond the staleness bound."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import art_core as art
from art_core.metrics import group_metrics


class SlowBackend:
    """A backend whose steps take `train_s` seconds; it records what each step trained and when."""

    def __init__(self, root: Path, step: int = 0, train_s: float = 0.05) -> None:
        self.root, self.step, self.train_s = root, step, train_s
        self.training = False
        self.steps: list[dict] = []  # per step: its config, the tasks and the sampled steps of its groups
        self.overlapped = 0  # rollouts that started while a step was training

    async def register(self, model: art.Model) -> art.Registration:
        return art.Registration(base_url="http://127.0.0.1:1/v1", served_name=model.name, step=self.step)

    async def get_step(self, model: art.Model) -> int:
        return self.step

    async def train(self, model: art.Model, groups: list, config: art.TrainConfig, *, verbose: bool = True):
        self.training = True
        await asyncio.sleep(self.train_s)
        self.training = False
        sampled = [s.step for g in groups for t in g.trajectories for _, s in t.samples()]
        self.steps.append({"start": self.step, "config": config, "sampled": sampled,
                           "tasks": [g.trajectories[0].metadata["task"] for g in groups]})
        self.step += 1
        return art.TrainResult(step=self.step, metrics={"loss": 0.0})

    async def log(self, model: art.Model, groups: list, split: str, step: int | None) -> dict:
        run = art.RunDir(model.project, model.name, self.root)
        run.write_trajectories(split, self.step if step is None else step, groups)
        return group_metrics(groups)


def make_rollout(backend: SlowBackend):  # noqa: ANN201
    async def rollout(model: art.Model, task: int) -> art.Trajectory:
        backend.overlapped += backend.training
        t = art.Trajectory(messages=[{"role": "user", "content": f"task {task}"}], reward=float(task % 2),
                           metadata={"task": task})
        await asyncio.sleep(0.01)  # a two-turn rollout may straddle a swap: its first turn is the older one
        t.turns.append(art.assistant_turn("a", token_ids=[1], step=backend.step))
        return t

    return rollout


async def _run(tmp_path: Path, bound: int, start: int = 0) -> tuple[SlowBackend, list[art.TrainResult]]:
    backend = SlowBackend(tmp_path, step=start)
    model = art.TrainableModel(name="p", project="p", base_model="tiny")
    await model.register(backend)  # type: ignore[arg-type]
    trainer = art.PipelineTrainer(model, make_rollout(backend), list(range(12)), groups_per_step=2, group_size=3,
                                  config=art.TrainConfig(learning_rate=1e-4), max_steps_off_policy=bound)
    return backend, await trainer.run()


@pytest.mark.parametrize("bound", [0, 1, 2])
async def test_rollouts_overlap_training_within_the_bound(tmp_path: Path, bound: int) -> None:
    backend, results = await _run(tmp_path, bound)
    assert [r.step for r in results] == [1, 2, 3, 4, 5, 6]
    assert sorted(t for s in backend.steps for t in s["tasks"]) == list(range(12))  # every task once
    ages = [s["start"] - sampled for s in backend.steps for sampled in s["sampled"]]
    assert max(ages) <= bound  # no sample older than the bound when its step starts
    assert all(s["config"].mode == "async" and s["config"].max_steps_off_policy == bound for s in backend.steps)
    assert all(s["config"].learning_rate == 1e-4 for s in backend.steps)
    if bound == 0:
        assert backend.overlapped == 0 and max(ages) == 0  # the synchronous loop
    else:
        assert backend.overlapped > 0 and max(ages) >= 1  # the next batch's rollouts ran during a step


async def test_a_resumed_pipeline_skips_the_trained_batches(tmp_path: Path) -> None:
    whole, _ = await _run(tmp_path / "a", bound=1)
    resumed, results = await _run(tmp_path / "b", bound=1, start=2)  # two steps trained before a crash
    assert [r.step for r in results] == [3, 4, 5, 6]
    assert [s["tasks"] for s in resumed.steps] == [s["tasks"] for s in whole.steps[2:]]


async def test_a_failed_rollout_batch_stops_the_pipeline(tmp_path: Path) -> None:
    backend = SlowBackend(tmp_path)
    model = art.TrainableModel(name="p", project="p", base_model="tiny")
    await model.register(backend)  # type: ignore[arg-type]

    async def broken(model: art.Model, task: int) -> art.Trajectory:
        raise RuntimeError(f"environment down on task {task}")

    trainer = art.PipelineTrainer(model, broken, [0, 1], group_size=2, max_exceptions=0)
    with pytest.raises(Exception, match="environment down"):
        await trainer.run()
    assert backend.steps == []


async def test_held_out_evaluation_runs_at_step_zero_and_every_n(tmp_path: Path) -> None:
    backend = SlowBackend(tmp_path)
    model = art.TrainableModel(name="p", project="p", base_model="tiny")
    await model.register(backend)  # type: ignore[arg-type]
    seen: list[int] = []

    async def held_out(model: art.Model, task: int) -> art.Trajectory:
        seen.append(backend.step)
        return art.Trajectory(messages=[{"role": "user", "content": "v"}], reward=float(backend.step))

    val = art.PeriodicEval(held_out, [100], every=2, show_progress=False)
    trainer = art.PipelineTrainer(model, make_rollout(backend), list(range(8)), groups_per_step=2, group_size=2,
                                  eval=val)
    results = await trainer.run()
    assert sorted(val.results) == [0, 2, 4] and val.results[4].mean == 4.0
    assert "val/reward_mean" in results[1].metrics and "val/reward_mean" not in results[0].metrics
