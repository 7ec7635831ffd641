"""`@rollout` and `capturing()`: run an existing graph as one captured rollout.

Inside, a LangChain configure hook attaches this rollout's `CaptureHandler` to every run, so the
graph's own code passes no callbacks. Each asyncio task and each thread started with a copied
context sees its own handler, so concurrent rollouts never mix their turns.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import numbers
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

from langchain_core.tracers.context import register_configure_hook

import art_core
from art_core import Trajectory

from .handler import CaptureHandler, active_handler

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

_hook_lock = threading.Lock()
_hook_registered = False


def _ensure_hook() -> None:
    # Registered on first use, not at import: importing art_graph changes nothing in LangChain.
    global _hook_registered
    if _hook_registered:
        return
    with _hook_lock:
        if not _hook_registered:
            register_configure_hook(active_handler, inheritable=True)
            _hook_registered = True


@contextlib.contextmanager
def capturing(
    trajectory: Trajectory | None = None, *, trainable_nodes: Iterable[str] | None = None
) -> Iterator[Trajectory]:
    """Capture every chat model call made in the block into one trajectory.

    The plain twin of `@rollout`: the trajectory gets its capture report and per-node metrics when
    the block ends; setting the reward is up to you.

    Example:
        with art_graph.capturing(trainable_nodes={"writer"}) as traj:
            await graph.ainvoke({"messages": [("user", task)]})
        traj.reward = score(traj)
    """
    _ensure_hook()
    nodes = _node_set(trainable_nodes)
    traj = trajectory if trajectory is not None else Trajectory()
    handler = CaptureHandler(traj, trainable_nodes=nodes)
    token = active_handler.set(handler)
    try:
        with art_core.capture(traj):
            yield traj
    finally:
        active_handler.reset(token)
        handler.flush()
        traj.metadata["capture"] = handler.report()
        traj.metrics.update(handler.node_metrics())
        reason = handler.untrainable_reason()
        traj.metrics["untrainable_rollouts"] = float(reason is not None)  # a group's mean: the share of them
        if reason is not None:
            traj.metadata["capture"]["untrainable"] = reason
            logger.warning("this rollout captured nothing trainable: %s", reason)
        if nodes is not None:
            traj.metadata["trainable_nodes"] = sorted(nodes)


def _node_set(nodes: Iterable[str] | None) -> set[str] | None:
    if nodes is None:
        return None
    if isinstance(nodes, str):
        raise TypeError(f"trainable_nodes takes a set of node names; wrap the one name: {{{nodes!r}}}")
    return set(nodes)


@overload
def rollout(fn: F, /) -> F: ...
@overload
def rollout(
    *, reward_fn: Callable[..., Any] | None = None, trainable_nodes: Iterable[str] | None = None
) -> Callable[[F], F]: ...


def rollout(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    reward_fn: Callable[..., Any] | None = None,
    trainable_nodes: Iterable[str] | None = None,
) -> Any:
    """Run the decorated function (sync or async) as one rollout and return its `Trajectory`.

    The function returns a reward (a number), per-node rewards (``{"node": reward}``), or a
    `Trajectory`. Given ``reward_fn``, it may return anything: ``reward_fn`` is called after the
    run with the arguments it names among ``result``, ``trajectory`` and the rollout's own
    arguments, and returns a reward or per-node rewards. ``trainable_nodes`` keeps training to
    those nodes' turns; the others are kept as context.

    Example:
        @art_graph.rollout(trainable_nodes={"agent"})
        async def run(task: str) -> float:
            state = await graph.ainvoke({"messages": [("user", task)]})
            return 1.0 if "42" in state["messages"][-1].content else 0.0

        trajectory = await run("What is 6 x 7?")
    """
    nodes = _node_set(trainable_nodes)
    if reward_fn is not None and not callable(reward_fn):
        raise TypeError(f"reward_fn must be a function, got {type(reward_fn).__name__}")

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(f):
            raise TypeError(
                f"@rollout decorates a function, got {type(f).__name__}; "
                "write @art_graph.rollout or @art_graph.rollout(reward_fn=...)"
            )
        if inspect.iscoroutinefunction(f):

            @functools.wraps(f)
            async def arun(*args: Any, **kwargs: Any) -> Trajectory:
                with capturing(trainable_nodes=nodes) as traj:
                    result = await f(*args, **kwargs)
                value = result
                if reward_fn is not None:
                    value = _call_reward(reward_fn, f, args, kwargs, result, traj)
                    if inspect.isawaitable(value):
                        value = await value
                return _finish(traj, value, f)

            return arun

        @functools.wraps(f)
        def run(*args: Any, **kwargs: Any) -> Trajectory:
            with capturing(trainable_nodes=nodes) as traj:
                result = f(*args, **kwargs)
            value = result
            if reward_fn is not None:
                value = _call_reward(reward_fn, f, args, kwargs, result, traj)
                if inspect.isawaitable(value):
                    raise TypeError(
                        f"reward_fn {reward_fn.__name__!r} is async but {f.__name__!r} is sync; "
                        "make the rollout function async too"
                    )
            return _finish(traj, value, f)

        return run

    return decorate(fn) if fn is not None else decorate


def _call_reward(
    reward_fn: Callable[..., Any],
    f: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    result: Any,
    traj: Trajectory,
) -> Any | Awaitable[Any]:
    """Call ``reward_fn`` with only the arguments it names (STYLE: hand arguments by name)."""
    available: dict[str, Any] = dict(inspect.signature(f).bind_partial(*args, **kwargs).arguments)
    available.update(result=result, trajectory=traj)
    params = inspect.signature(reward_fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return reward_fn(**available)
    missing = [
        n
        for n, p in params.items()
        if n not in available
        and p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if missing:
        raise TypeError(
            f"reward_fn {reward_fn.__name__!r} asks for {missing}; it can take 'result', 'trajectory' "
            f"or any argument of {f.__name__!r} ({list(inspect.signature(f).parameters)})"
        )
    return reward_fn(**{n: available[n] for n in params if n in available})


def _finish(traj: Trajectory, value: Any, f: Callable[..., Any]) -> Trajectory:
    if isinstance(value, Trajectory):
        if value is not traj:
            _adopt(value, traj)
        return value.finish()
    if isinstance(value, Mapping):
        set_node_rewards(traj, value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        traj.reward = float(value)
    else:
        raise TypeError(
            f"rollout {f.__name__!r} returned {type(value).__name__}; return a reward (a number), "
            "per-node rewards ({'node': reward}) or a Trajectory, or pass reward_fn= to the decorator"
        )
    return traj.finish()


def _adopt(target: Trajectory, captured: Trajectory) -> None:
    """A rollout built its own Trajectory: give it the captured turns unless it has its own."""
    if not target.turns and not target.additional_histories:
        target.turns = captured.turns
        target.tools = captured.tools
        target.additional_histories = captured.additional_histories
    for key, value in captured.metadata.items():
        target.metadata.setdefault(key, value)
    for key, value in captured.metrics.items():
        target.metrics.setdefault(key, value)


def set_node_rewards(trajectory: Trajectory, rewards: Mapping[str, float]) -> None:
    """Give rewards per graph node; the trajectory's reward becomes their mean.

    `node_groups` turns them into per-node credit for training.
    """
    if not rewards:
        raise ValueError("per-node rewards are empty; return at least one {'node': reward} pair or a number")
    clean: dict[str, float] = {}
    for node, value in rewards.items():
        if not isinstance(node, str) or not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"per-node rewards map node names to numbers; got {node!r}: {value!r}")
        clean[node] = float(value)
    trajectory.metadata["node_rewards"] = clean
    for node, value in clean.items():
        trajectory.metrics[f"node/{node}/reward"] = value
    trajectory.reward = sum(clean.values()) / len(clean)
