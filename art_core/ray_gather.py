"""Rollouts as Ray tasks: what ``gather_trajectory_groups(..., executor="ray")`` runs.

A rollout is handed to the gather as a coroutine not yet started (``rollout(model, task)``). Here it is
turned back into its function and arguments, which go to a Ray worker; the worker runs the function
with asyncio and reaches the model's OpenAI endpoint over HTTP. A `Model` crosses as plain data, its
endpoint without its backend (`Model.__getstate__`). The gather's concurrency limit, progress bar and
exception policy stay in the driver: to them a Ray task is one more awaitable. Ray is imported only here,
and only when a gather asks for it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .trajectory import Trajectory

__all__ = ["ray_rollouts"]

logger = logging.getLogger(__name__)

RolloutCall = tuple[Callable[..., Awaitable[Trajectory]], tuple[Any, ...], dict[str, Any]]


def rollout_call(aw: Awaitable[Trajectory]) -> RolloutCall:
    """The function and arguments of `aw`, a coroutine that has not started (it is closed here)."""
    if not inspect.iscoroutine(aw) or inspect.getcoroutinestate(aw) != inspect.CORO_CREATED:
        raise TypeError(
            f"executor='ray' runs rollouts given as calls of an async function not yet awaited, e.g. "
            f"TrajectoryGroup(rollout(model, task) for _ in range(8)); got {aw!r}"
        )
    code, frame, qualname = aw.cr_code, aw.cr_frame, aw.__qualname__
    assert frame is not None  # a coroutine not started has its frame
    fn: Any = sys.modules.get(frame.f_globals.get("__name__", ""))
    for part in qualname.split("."):
        fn = getattr(fn, part, None)
    fn = getattr(fn, "__func__", fn)  # a classmethod: its function (the class is in the arguments)
    if "<locals>" in qualname or getattr(fn, "__code__", None) is not code:
        aw.close()
        raise TypeError(
            f"executor='ray' sends the rollout function to a Ray worker by its module and name, and "
            f"{qualname!r} cannot be found that way (a function defined inside another one); define it at "
            f"module level in {frame.f_globals.get('__name__')!r}"
        )
    # before it starts, a coroutine's frame holds exactly its bound arguments
    values, names = frame.f_locals, code.co_varnames
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    args = [values[n] for n in names[:npos]]
    kwargs = {n: values[n] for n in names[npos : npos + nkw]}
    rest = npos + nkw
    if code.co_flags & inspect.CO_VARARGS:
        args += values[names[rest]]
        rest += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs.update(values[names[rest]])
    aw.close()
    return fn, tuple(args), kwargs


def _run_rollout(fn: Callable[..., Awaitable[Trajectory]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """In the Ray worker: one rollout, on its own event loop."""

    async def run() -> Any:
        return await fn(*args, **kwargs)

    return asyncio.run(run())


def _ensure_ray() -> Any:
    import ray  # the optional extra: pip install 'art-rl[ray]'

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init()  # joins that cluster
            logger.info("joined the Ray cluster at %s", os.environ["RAY_ADDRESS"])
        else:
            ray.init(num_cpus=2, include_dashboard=False)
            logger.info("started a local Ray with 2 CPUs; call ray.init() first for another size or a cluster")
    return ray


@functools.cache
def _task() -> Any:
    ray = _ensure_ray()
    return ray.remote(_run_rollout)


async def _on_ray(call: RolloutCall, options: Mapping[str, Any]) -> Any:
    ray = _ensure_ray()
    task = _task()
    ref = (task.options(**options) if options else task).remote(*call)
    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause  # the rollout's own exception, as raised in the worker
        if isinstance(cause, Exception):
            raise cause from exc  # counted and recorded as the local gather does; the worker's traceback chained
        raise


def ray_rollouts(
    pending: list[list[Awaitable[Trajectory]]], options: Mapping[str, Any] | None = None
) -> list[list[Awaitable[Trajectory]]]:
    """Each group's `pending` rollouts as Ray tasks, each submitted when first awaited (the gather's limit holds).

    `options` go to Ray's ``.options()`` (``num_cpus``, ``resources``, ``runtime_env``...). A rollout
    that cannot be sent raises TypeError before any runs, and every coroutine given is closed then.
    """
    try:
        calls = [[rollout_call(aw) for aw in group] for group in pending]
    except TypeError:
        for aw in (aw for group in pending for aw in group):
            if inspect.iscoroutine(aw):
                aw.close()
        raise
    return [[_on_ray(call, options or {}) for call in group] for group in calls]
