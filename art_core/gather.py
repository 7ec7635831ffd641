"""Run many rollouts at once: bounded concurrency, a progress bar, exceptions kept, not lost."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .trajectory import RolloutError, Trajectory, TrajectoryGroup

logger = logging.getLogger(__name__)

AfterEach = Callable[
    [TrajectoryGroup],
    TrajectoryGroup | None | list[TrajectoryGroup] | Awaitable[TrajectoryGroup | None | list[TrajectoryGroup]],
]


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


async def _settle(tasks: list[asyncio.Future[Any]]) -> None:
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
) -> list[TrajectoryGroup]:
    """Finish every group's rollouts, at most `max_concurrency` at a time, in the order given.

    `max_exceptions` is a count, or a fraction of all rollouts when it is a float below 1; past it
    the gather stops and raises `TooManyExceptions`. Failures within the limit are recorded on
    their group (``group.exceptions``). `after_each` sees each finished group and returns it, a
    replacement, a list of groups, or None to drop it (RULER scoring fits here).

    Example:
        groups = await gather_trajectory_groups(
            (TrajectoryGroup(rollout(model, t) for _ in range(8)) for t in tasks),
            after_each=lambda g: ruler.score_group(g, judge="openai/gpt-4.1-mini"),
            max_exceptions=2,
        )
    """
    groups = list(groups)
    pending = [g.take_pending() for g in groups]
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
        return await _apply(after_each, group)

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
) -> list[Trajectory]:
    """Finish independent rollouts; failures within `max_exceptions` are logged and left out."""
    group = TrajectoryGroup(trajectories)
    [group] = await gather_trajectory_groups(
        [group],
        max_exceptions=max_exceptions,
        max_concurrency=max_concurrency,
        pbar_desc=pbar_desc,
        show_progress=show_progress,
    )
    return group.trajectories


__all__ = ["RolloutError", "TooManyExceptions", "gather_trajectories", "gather_trajectory_groups"]
