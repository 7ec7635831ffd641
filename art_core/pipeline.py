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
from .pipeline_port import ArtEval, GroupRollout, art_args, refuse, take
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

    OpenPipe ART's keywords are accepted too (`pipeline_port.py`): ``backend=``, ``rollout_fn=``
    (``async (model, scenario, config) -> TrajectoryGroup``), ``scenarios=`` (taken in order, an
    iterator or async iterator), ``config=`` (then handed to ``rollout_fn`` and ``eval_fn``),
    ``eval_fn=``, ``eval_every_n_steps=``, ``eval_at_start=``, ``min_batch_size=`` (our
    ``groups_per_step``), ``max_steps=``, ``max_steps_off_policy=``, ``num_rollout_workers=``,
    ``pipeline=``, ``learning_rate=``, ``loss_fn=``, ``normalize_advantages=``, ``kl_penalty_coef=``;
    then ``await trainer.train()``. ART's other keywords are refused by name. docs/porting.md has the table.

    Example:
        trainer = art.PipelineTrainer(model, rollout, tasks, groups_per_step=4, group_size=8,
                                      config=art.TrainConfig(learning_rate=1e-5), num_epochs=3,
                                      eval=art.PeriodicEval(rollout, val_tasks, every=5))
        results = await trainer.run()
    """

    def __init__(self, model: TrainableModel, rollout: Rollout | None = None, dataset: Sequence[Any] | None = None, *,
                 groups_per_step: int = 1, group_size: int = 4, config: Any = None, num_epochs: int = 1,
                 max_steps_off_policy: int = 1, eval: Any = None, seed: int = 0, **gather_kwargs: Any) -> None:
        art = art_args(gather_kwargs, config)
        self._group_rollout: GroupRollout | None = None
        self._scenarios: Any = None
        self.max_steps: int | None = None
        self.backend: Any = None
        if art is not None:  # ART's form: config= is the rollout's, the training settings come as keywords
            if rollout is not None or dataset is not None or eval is not None:
                raise TypeError("pass either ours (rollout, dataset, eval=) or ART's (rollout_fn=, scenarios=, eval_fn=)")
            self._group_rollout, self._scenarios, config = art.rollout, art.scenarios, art.train_config
            groups_per_step = art.groups_per_step or groups_per_step
            if art.max_steps_off_policy is not None:
                max_steps_off_policy = art.max_steps_off_policy
            eval, self.max_steps, self.backend = art.eval, art.max_steps, art.backend
        elif rollout is None or dataset is None:
            raise TypeError("PipelineTrainer needs rollout and dataset (or ART's rollout_fn= and scenarios=)")
        elif config is not None and not isinstance(config, TrainConfig):
            raise TypeError(f"config is a TrainConfig, got {type(config).__name__} (ART's config= goes with rollout_fn=)")
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
        if self._group_rollout is not None:  # ART's rollout_fn returns the whole group
            done = await asyncio.gather(*(self._group_rollout(self.model, task) for task in items))
            return await gather_trajectory_groups(done, **self.gather_kwargs)
        assert self.rollout is not None
        groups = (TrajectoryGroup(self.rollout(self.model, task) for _ in range(self.group_size)) for task in items)
        return await gather_trajectory_groups(groups, **self.gather_kwargs)

    async def _batches(self, start: int, num_steps: int | None) -> list[Sequence[Any]]:
        if self._scenarios is not None:  # ART's order: as given, the trained steps' scenarios passed over
            n = self.groups_per_step
            items = await take(self._scenarios, start * n, None if num_steps is None else num_steps * n)
            return [items[i:i + n] for i in range(0, len(items), n)]  # the last may be short, as in ART
        assert self.dataset is not None
        batches: list[Sequence[Any]] = [b.items for b in iterate_dataset(
            self.dataset, self.groups_per_step, self.num_epochs, initial_step=start, seed=self.seed)]
        return batches[:num_steps] if num_steps is not None else batches

    async def train(self, *, handle_signals: bool = False) -> list[TrainResult]:
        """OpenPipe ART's name: `run` for ``max_steps`` steps (ART's keyword; None: until the scenarios end).

        ``handle_signals=True`` is refused: no signal handler is installed, Ctrl-C stops at once, and
        a rerun resumes after the last trained step.
        """
        if handle_signals:
            raise refuse("handle_signals", True, "Ctrl-C stops at once; a rerun resumes after the last trained step")
        return await self.run(self.max_steps)

    async def run(self, num_steps: int | None = None) -> list[TrainResult]:
        """Train until the dataset (or `num_steps` more steps) is done; returns the steps' results."""
        if self.backend is not None and getattr(self.model, "_backend", None) is not self.backend:
            if getattr(self.model, "_backend", None) is not None:
                raise ValueError("backend= is not the backend the model is registered with")
            await self.model.register(self.backend)
        start = await self.model.get_step()
        batches = await self._batches(start, num_steps)
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
                    gathered[i].set_result(await self._gather(batch))
                except Exception as exc:  # noqa: BLE001 - handed to the training loop, which raises it
                    gathered[i].set_exception(exc)
                    return

        producer = asyncio.ensure_future(produce())
        try:
            if self.eval is not None and (start == 0 or isinstance(self.eval, ArtEval)):
                await self.eval(self.model)  # step 0 (ART's eval_at_start: any start)
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
