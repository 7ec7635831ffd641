"""`PipelineTrainer`: rollouts for the next steps run while a step trains, up to a staleness bound.

The synchronous loop alternates: gather a batch's groups, train on them, gather the next. Here a
producer gathers batch i as soon as the step for batch i - 1 - `max_steps_off_policy` is trained, so
with the default bound of 1 the rollouts of the next batch run while the current one trains, and no
sample is older than the bound when its step starts. Every step is trained with
``TrainConfig(mode="async", max_steps_off_policy=...)``, so the backend leaves inference open and
drops and corrects anything older (a multi-turn rollout may span a swap).

Resuming after a crash keeps the synchronous loop's guarantees: batches come from `iterate_dataset`
with ``initial_step=await model.get_step()``, so a batch whose step was trained is skipped, and a
batch gathered but not trained is gathered again; a step cut off mid-call is retried by the backend
with its step id, never trained twice. Groups are built and gathered as in the synchronous loop
(`TrajectoryGroup`, `gather_trajectory_groups`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .backend import TrainResult
from .config import TrainConfig
from .dataset import iterate_dataset
from .gather import gather_trajectory_groups
from .model import TrainableModel
from .trajectory import Trajectory, TrajectoryGroup

__all__ = ["PipelineTrainer"]

logger = logging.getLogger(__name__)

Rollout = Callable[[TrainableModel, Any], Awaitable[Trajectory]]


class PipelineTrainer:
    """Train `model` on `dataset` with rollouts overlapping training.

    Args:
        model: a registered `TrainableModel`.
        rollout: ``async rollout(model, task) -> Trajectory`` (with its reward set).
        dataset: the training tasks; `groups_per_step` tasks a step, `group_size` rollouts a task.
        config: the `TrainConfig` of every step (its mode and bound are set here).
        max_steps_off_policy: how many steps behind the trainer a batch's rollouts may start (0: the
            synchronous loop, with inference still left open while a step trains).
        eval: a `PeriodicEval` called after every step (it decides when to evaluate).
        gather_kwargs: passed to `gather_trajectory_groups` (``after_each``, ``max_exceptions``, ...).

    Example:
        trainer = art.PipelineTrainer(model, rollout, tasks, groups_per_step=4, group_size=8,
                                      config=art.TrainConfig(learning_rate=1e-5), num_epochs=3,
                                      eval=art.PeriodicEval(rollout, val_tasks, every=5))
        results = await trainer.run()
    """

    def __init__(self, model: TrainableModel, rollout: Rollout, dataset: Sequence[Any], *, groups_per_step: int = 1,
                 group_size: int = 4, config: TrainConfig | None = None, num_epochs: int = 1,
                 max_steps_off_policy: int = 1, eval: Any = None, seed: int = 0, **gather_kwargs: Any) -> None:
        if max_steps_off_policy < 0:
            raise ValueError(f"max_steps_off_policy must be 0 or more, got {max_steps_off_policy}")
        if group_size < 1:
            raise ValueError(f"group_size must be at least 1, got {group_size}")
        self.model, self.rollout, self.dataset = model, rollout, dataset
        self.groups_per_step, self.group_size, self.num_epochs, self.seed = groups_per_step, group_size, num_epochs, seed
        self.config = (config or TrainConfig()).model_copy(
            update={"mode": "async", "max_steps_off_policy": max_steps_off_policy})
        self.max_steps_off_policy = max_steps_off_policy
        self.eval = eval
        self.gather_kwargs = {"show_progress": False, **gather_kwargs}
        self.results: list[TrainResult] = []

    async def _gather(self, items: Sequence[Any]) -> list[TrajectoryGroup]:
        groups = (TrajectoryGroup(self.rollout(self.model, task) for _ in range(self.group_size)) for task in items)
        return await gather_trajectory_groups(groups, **self.gather_kwargs)

    async def run(self, num_steps: int | None = None) -> list[TrainResult]:
        """Train until the dataset (or `num_steps` more steps) is done; returns the steps' results."""
        start = await self.model.get_step()
        batches = list(iterate_dataset(self.dataset, self.groups_per_step, self.num_epochs, initial_step=start,
                                       seed=self.seed))
        batches = batches[:num_steps] if num_steps is not None else batches
        trained = 0
        progressed = asyncio.Condition()
        gathered: list[asyncio.Future[list[TrajectoryGroup]]] = [asyncio.get_running_loop().create_future()
                                                                for _ in batches]

        async def produce() -> None:
            for i, batch in enumerate(batches):
                def ready(i: int = i) -> bool:
                    return trained >= i - self.max_steps_off_policy

                async with progressed:  # batch i waits for the step of batch i - 1 - bound: no older samples
                    await progressed.wait_for(ready)
                try:
                    gathered[i].set_result(await self._gather(batch.items))
                except Exception as exc:  # noqa: BLE001 - handed to the training loop, which raises it
                    gathered[i].set_exception(exc)
                    return

        producer = asyncio.ensure_future(produce())
        try:
            if self.eval is not None and start == 0:
                await self.eval(self.model)  # step 0
            for i in range(len(batches)):
                groups = await gathered[i]
                result = await self.model.train(groups, config=self.config, verbose=False)
                if self.eval is not None:
                    await self.eval(self.model, result)
                self.results.append(result)
                async with progressed:
                    trained = i + 1
                    progressed.notify_all()
                logger.info("pipeline: step %d trained (%d of %d)", result.step, i + 1, len(batches))
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
            for future in gathered:  # a gather that failed after the loop stopped: observed, not left pending
                if future.done() and not future.cancelled():
                    future.exception()
        return self.results
