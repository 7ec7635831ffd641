"""Run many rollouts at once: bounded concurrency, a progress bar, exceptions kept, not lost."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from . import tracing
from .trajectory import RolloutError, Trajectory, TrajectoryGroup

logger = logging.getLogger(__name__)

AfterEach = Callable[
    [TrajectoryGroup],
    TrajectoryGroup | None | list[TrajectoryGroup] | Awaitable[TrajectoryGroup | None | list[TrajectoryGroup]],
]


Executor = Literal["local", "ray"]


class TooManyExceptions(RuntimeError):
    """More rollouts failed than `max_exceptions` allows; the first failure is the cause."""


class _Tally:
    def __init__(self, total: int, max_exceptions: int | float, desc: str, show: bool) -> None:
        self.total = total
        self.limit = max_exceptions if isinstance(max_exceptions, int) else math.floor(max_exceptions * total)
        self.errors = 0
        self.rewards: list[float] = []
        self.first_error: BaseException | None = None
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("reward {task.fields[reward]}  exceptions {task.fields[errors]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            disable=not show,
            transient=False,
        )
        self.task = self.progress.add_task(desc, total=total, reward="-", errors=0)

    def done(self, result: Trajectory | BaseException) -> None:
        if isinstance(result, BaseException):
            self.errors += 1
            self.first_error = self.first_error or result
            logger.warning("rollout failed (%d so far): %r", self.errors, result)
        else:
            self.rewards.append(result.reward)
        mean = f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"
        self.progress.update(self.task, advance=1, reward=mean, errors=self.errors)
        if self.errors > self.limit:
            raise TooManyExceptions(
                f"{self.errors} rollouts failed, more than max_exceptions={self.limit}; first failure: "
                f"{self.first_error!r}"
            ) from self.first_error


async def _run(aw: Awaitable[Trajectory], sem: asyncio.Semaphore | None) -> Trajectory | BaseException:
    try:
        if sem is None:
            return await aw
        async with sem:
            return await aw
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # recorded on the group, counted against max_exceptions
        return exc


async def _settle(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Wait until every task is done, even if this task is cancelled meanwhile (then re-raise that)."""
    cancelled = False
    while not all(t.done() for t in tasks):
        try:
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


async def _apply(after_each: AfterEach | None, group: TrajectoryGroup) -> list[TrajectoryGroup]:
    if after_each is None:
        return [group]
    out: Any = after_each(group)
    if inspect.isawaitable(out):
        out = await out
    if out is None:
        logger.info("after_each dropped a group of %d trajectories", len(group.trajectories))
        return []
    return list(out) if isinstance(out, list) else [out]


async def gather_trajectory_groups(
    groups: Iterable[TrajectoryGroup],
    *,
    max_exceptions: int | float = 0,
    max_concurrency: int | None = None,
    after_each: AfterEach | None = None,
    pbar_desc: str = "gather",
    show_progress: bool = True,
    pbar_total_completion_tokens: bool | None = None,
    max_metrics: int | None = None,
    executor: Executor = "local",
    ray_options: Mapping[str, Any] | None = None,
) -> list[TrajectoryGroup]:
    """Finish every group's rollouts, at most `max_concurrency` at a time, in the order given.

    `max_exceptions` is a count, or a fraction of all rollouts when it is a float below 1; past it
    the gather stops and raises `TooManyExceptions`. Failures within the limit are recorded on
    their group (``group.exceptions``). `after_each` sees each finished group and returns it, a
    replacement, a list of groups, or None to drop it (RULER scoring fits here).
    ``pbar_total_completion_tokens`` and ``max_metrics`` (OpenPipe ART's progress-bar options) are
    accepted and do nothing.

    ``executor="ray"`` runs each rollout as a Ray task (``pip install 'art-rl[ray]'``): the rollout
    function (defined at module level) and its arguments go to a Ray worker, which reaches the model's
    endpoint over HTTP; results, exceptions, `after_each` and progress are handled here as for local
    rollouts. Ray starts locally with 2 CPUs unless it is initialised or ``RAY_ADDRESS`` names a
    cluster; `ray_options` go to each task's ``.options()`` (e.g. ``{"num_cpus": 0.5}``).

    Example:
        groups = await gather_trajectory_groups(
            (TrajectoryGroup(rollout(model, t) for _ in range(8)) for t in tasks),
            after_each=lambda g: ruler.score_group(g, judge="openai/gpt-4.1-mini"),
            max_exceptions=2,
        )
    """
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    groups = list(groups)
    pending = [g.take_pending() for g in groups]
    if executor == "ray":
        from .ray_gather import ray_rollouts

        pending = ray_rollouts(pending, ray_options)
    total = sum(len(p) for p in pending)
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    tally = _Tally(total, max_exceptions, pbar_desc, show_progress)

    async def finish(group: TrajectoryGroup, awaitables: list[Awaitable[Trajectory]]) -> list[TrajectoryGroup]:
        tasks = [asyncio.ensure_future(_run(aw, sem)) for aw in awaitables]
        try:
            for fut in asyncio.as_completed(tasks):
                tally.done(await fut)
        finally:
            for t in tasks:
                t.cancel()
            # wait for the cancelled rollouts to finish their cleanup (close sessions, stop servers):
            # a rollout left running would outlive the gather and the resources the caller closes next
            await _settle(tasks)
        for t in tasks:  # keep rollout order within the group
            group.add_result(t.result())
        out = await _apply(after_each, group)
        if tracing.tracing_enabled():  # one trace per rollout, now that its reward is final
            for traj in (t for g in out for t in g.trajectories):
                tracing.trace_trajectory(traj)
        return out

    with tally.progress:
        jobs = [asyncio.ensure_future(finish(g, p)) for g, p in zip(groups, pending, strict=True)]
        try:
            results = await asyncio.gather(*jobs)
        except BaseException:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
    return [g for out in results for g in out]


async def gather_trajectories(
    trajectories: Iterable[Awaitable[Trajectory]],
    *,
    max_exceptions: int | float = 0,
    max_concurrency: int | None = None,
    pbar_desc: str = "gather",
    show_progress: bool = True,
    executor: Executor = "local",
    ray_options: Mapping[str, Any] | None = None,
) -> list[Trajectory]:
    """Finish independent rollouts; failures within `max_exceptions` are logged and left out.
    `executor`, `ray_options`: as in `gather_trajectory_groups`."""
    group = TrajectoryGroup(trajectories)
    [group] = await gather_trajectory_groups(
        [group],
        max_exceptions=max_exceptions,
        max_concurrency=max_concurrency,
        pbar_desc=pbar_desc,
        show_progress=show_progress,
        executor=executor,
        ray_options=ray_options,
    )
    return group.trajectories


async def trajectory_group_batches(
    groups: Iterable[TrajectoryGroup],
    *,
    batch_size: int,
    max_batch_exceptions: int | float = 0,
    max_concurrent_batches: int = 4,
    skip_batches: int = 0,
    pbar_desc: str | None = "batches",
    pbar_total_completion_tokens: bool | None = None,
) -> AsyncIterator[list[TrajectoryGroup]]:
    """Yield batches of `batch_size` finished groups as they finish (OpenPipe ART's pipelined loop).

    Up to ``batch_size * max_concurrent_batches`` groups run at once, so the next batch's rollouts
    go on while you train on this one; groups come in the order they finish. The first
    ``skip_batches * batch_size`` groups are skipped (resume). More than `max_batch_exceptions`
    failed rollouts in one batch (a count, or a fraction of its rollouts) raises
    `TooManyExceptions`. Leaving the loop early cancels the groups still running.

    Example:
        async for batch in art.trajectory_group_batches(groups, batch_size=4):
            await model.train(batch)
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    waiting = list(groups)[batch_size * skip_batches :]
    running: set[asyncio.Future[list[TrajectoryGroup]]] = set()
    batch: list[TrajectoryGroup] = []

    async def finish(group: TrajectoryGroup) -> list[TrajectoryGroup]:
        # every failure is kept on the group; the batch decides (check)
        return await gather_trajectory_groups([group], max_exceptions=group.pending, show_progress=False)

    def check(groups: list[TrajectoryGroup]) -> None:
        failed = sum(len(g.exceptions) for g in groups)
        total = failed + sum(len(g.trajectories) for g in groups)
        limit = max_batch_exceptions if isinstance(max_batch_exceptions, int) else max_batch_exceptions * total
        if failed > limit:
            first = next(e for g in groups for e in g.exceptions)
            raise TooManyExceptions(
                f"{failed} rollouts failed in a batch, more than max_batch_exceptions={max_batch_exceptions}; "
                f"first failure: {first.type}: {first.message}"
            )

    try:
        while waiting or running:
            while waiting and len(running) < batch_size * max_concurrent_batches:
                running.add(asyncio.ensure_future(finish(waiting.pop(0))))
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                batch += fut.result()
            while len(batch) >= batch_size:
                out, batch = batch[:batch_size], batch[batch_size:]
                check(out)
                yield out
        if batch:
            check(batch)
            yield batch
    finally:
        for fut in running:
            fut.cancel()
        await _settle(list(running))


__all__ = [
    "RolloutError",
    "TooManyExceptions",
    "gather_trajectories",
    "gather_trajectory_groups",
    "trajectory_group_batches",
]
