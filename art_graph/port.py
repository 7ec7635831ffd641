"""OpenPipe ART's `art.langgraph` names: `wrap_rollout(model, fn)` and `init_chat_model()`.

Both sit on ours: `wrap_rollout` runs ``fn`` under `@rollout` and makes ``model`` current, and
`init_chat_model` returns `chat_model(current model)`. Arguments we cannot honour are refused by name.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.language_models import BaseChatModel

from art_core import Model, Trajectory

from .chat import chat_model as _chat_model
from .rollout import rollout

_current: contextvars.ContextVar[Model | None] = contextvars.ContextVar("art_graph_port_model", default=None)

# init_chat_model's arguments that name another endpoint or model: refused, with what to use instead.
_REFUSED = {
    "base_url": "the endpoint is the wrapped model's; for another one call art_graph.chat_model(other_model)",
    "api_key": "the endpoint is the wrapped model's; for another one call art_graph.chat_model(other_model)",
}


def wrap_rollout(
    model: Model, fn: Callable[..., Awaitable[Trajectory]]
) -> Callable[..., Awaitable[Trajectory]]:
    """OpenPipe ART's ``wrap_rollout(model, fn)``: ``fn`` (async) builds and returns a `Trajectory`
    with its reward; every chat model call made inside, from `init_chat_model()` or any LangChain
    model, is recorded into it (`@art_graph.rollout` does the capture).

    Unlike ART, turns the returned trajectory already holds are kept, not replaced by the captured
    ones. ``fn`` may also return a reward (a number), as under `@art_graph.rollout`.

    Example:
        async def run(scenario: dict) -> art.Trajectory:
            llm = init_chat_model(temperature=0.7)
            await graph(llm).ainvoke({"messages": [("user", scenario["task"])]})
            return art.Trajectory(messages_and_choices=[], reward=1.0)

        trajectory = await wrap_rollout(model, run)(scenario)
    """
    if not isinstance(model, Model):
        raise TypeError(f"wrap_rollout() takes an art_core Model or TrainableModel, got {type(model).__name__}")
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(
            f"wrap_rollout() wraps an async function, got {getattr(fn, '__name__', type(fn).__name__)!r}; "
            "for a sync one use @art_graph.rollout"
        )
    captured = rollout(fn)

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Trajectory:
        token = _current.set(model)
        try:
            return await captured(*args, **kwargs)
        finally:
            _current.reset(token)

    return wrapper


def init_chat_model(
    model: str | None = None,
    *,
    model_provider: str | None = None,
    configurable_fields: None = None,
    config_prefix: str | None = None,
    chat_model: BaseChatModel | None = None,
    timeout_seconds: float | None = None,
    temperature: float = 1.0,
    **kwargs: Any,
) -> BaseChatModel:
    """OpenPipe ART's ``init_chat_model()`` inside a `wrap_rollout` function: the wrapped model's chat
    model, ``art_graph.chat_model(model, temperature=temperature, **kwargs)``.

    ``model_provider`` and ``config_prefix`` are accepted and unused, as in ART (the provider is the
    wrapped model's endpoint). ``timeout_seconds`` is each request's timeout. ``chat_model`` (a chat
    model of your own) is returned as it is; its calls are recorded as context, not trained.
    ``model`` may name the wrapped model (``model.get_inference_name()``, as ART's examples do);
    another name is refused, as are ``configurable_fields``, ``base_url`` and ``api_key``.
    """
    if configurable_fields is not None:
        raise TypeError("init_chat_model(configurable_fields=...) is not supported (ART accepts only None)")
    for name, instead in _REFUSED.items():
        if name in kwargs:
            raise TypeError(f"init_chat_model({name}=...) is not supported: {instead}")
    current = _current.get()
    if current is None:
        raise RuntimeError(
            "init_chat_model() is called inside a function wrapped by art_graph.wrap_rollout(model, fn); "
            "outside one, use art_graph.chat_model(model)"
        )
    if model is not None and model not in (current.served_name(), current.name):
        raise TypeError(
            f"init_chat_model(model={model!r}) names another model than the one wrap_rollout was given "
            f"({current.served_name()!r}); for another model call art_graph.chat_model(other_model)"
        )
    if chat_model is not None:
        return chat_model
    if timeout_seconds is not None:
        kwargs["timeout"] = timeout_seconds
    return _chat_model(current, temperature=temperature, **kwargs)
