"""The capture context: where plugins write "the trajectory of the rollout running now".

A rollout runs inside `capture()`. Each asyncio task sees its own trajectory (context variables are
copied per task), so concurrent rollouts never mix their turns. Plugins call `record_completion`
for each chat completion they see, and `record_tool_result` for each tool they run.

A completion whose request extends a history already captured joins that history; any other
becomes an additional history (a sub-agent, a parallel branch).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator
from typing import Any

from . import tracing as _tracing
from .trajectory import SAMPLE_KEY, History, Message, Sample, Tool, Trajectory, clean_message, sampled_tokens

logger = logging.getLogger(__name__)

_current: contextvars.ContextVar[Trajectory | None] = contextvars.ContextVar("art_trajectory", default=None)
_node: contextvars.ContextVar[str | None] = contextvars.ContextVar("art_node", default=None)


def current_trajectory() -> Trajectory | None:
    """The trajectory of the rollout running in this context, or None outside a rollout."""
    return _current.get()


def current_node() -> str | None:
    """The graph node set by the innermost `node()` block, or None."""
    return _node.get()


@contextlib.contextmanager
def capture(trajectory: Trajectory | None = None) -> Iterator[Trajectory]:
    """Run a block as one rollout; every captured call lands in the yielded trajectory.

    Example:
        with capture() as traj:
            await client.chat.completions.create(...)
        traj.reward = score(traj)
    """
    trajectory = trajectory if trajectory is not None else Trajectory()
    token = _current.set(trajectory)
    try:
        yield trajectory
    finally:
        _current.reset(token)


def _normal(message: Message) -> tuple[Any, ...]:
    """A comparable form of a message: role, content and tool calls, nothing else.

    A tuple, not a JSON string: equality is the same and it is several times cheaper (capture
    runs on every LLM call; see benchmarks/capture_overhead.py).
    """
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = [
        (c.get("id"), (c.get("function") or {}).get("name"), _args((c.get("function") or {}).get("arguments")))
        for c in message.get("tool_calls") or []
    ]
    return (message.get("role"), content or "", calls, message.get("tool_call_id"))


def _args(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _extends(history: list[Message], request: list[Message], normal: list[tuple[Any, ...] | None]) -> bool:
    """Whether ``request`` starts with ``history`` (compared in normal form).

    ``normal`` caches the request's normal forms. Equal dicts (a graph hands back the same messages)
    need no normalising: the cheap check comes first.
    """
    if len(history) > len(request):
        return False
    for i, a in enumerate(history):
        b = request[i]
        if a == b or (SAMPLE_KEY in a and clean_message(a) == b):
            continue
        if normal[i] is None:
            normal[i] = _normal(b)
        if _normal(a) != normal[i]:
            return False
    return True


def record_completion(
    request_messages: list[Message],
    response: Message,
    *,
    tools: list[Tool] | None = None,
    sample: Sample | None = None,
    trajectory: Trajectory | None = None,
) -> History | None:
    """Add one chat completion (the request's messages and the reply) to the current trajectory.

    `sample` marks the reply as produced by the trainable model. Returns the history it joined,
    or None when no rollout is being captured.
    """
    traj = trajectory if trajectory is not None else _current.get()
    if traj is None:
        return None
    reply = clean_message(response)
    reply["role"] = "assistant"
    if sample is not None:
        if sample.node is None and _node.get() is not None:
            sample = sample.model_copy(update={"node": _node.get()})
        reply[SAMPLE_KEY] = sample.model_dump(exclude_none=True)
    joined = add_completion(traj, request_messages, reply, tools)
    return joined if joined is not None else History.model_construct(turns=traj.turns, tools=traj.tools)


def add_completion(
    traj: Trajectory, request_messages: list[Message], reply: Message, tools: list[Tool] | None = None
) -> History | None:
    """`record_completion` for a reply that is already an assistant message dict, stored as is.

    A trainable reply carries its ``"sample"`` already dumped (`sample_dict`). Plugins on a hot path
    (art_graph's handler) call this to skip validation. Returns the additional history the
    completion joined or started; None when it joined the main history.
    """
    _tracing.on_completion(traj, request_messages, reply, tools)  # a no-op unless tracing is on
    request = list(request_messages)
    normal_request: list[tuple[Any, ...] | None] = [None] * len(request)

    candidates: list[tuple[int, list[Message], History | None]] = [(len(traj.turns), traj.turns, None)]
    candidates += [(len(h.turns), h.turns, h) for h in traj.additional_histories]
    best = None  # the longest history the request extends (the first one, on a tie)
    for c in candidates:
        if (best is None or c[0] > best[0]) and _extends(c[1], request, normal_request):
            best = c
    if best is not None and (best[0] > 0 or best[2] is None):
        turns = best[1]
        turns.extend(dict(m) for m in request[len(turns):])
        turns.append(reply)
        joined = best[2]
        if joined is None:
            if tools and traj.tools is not tools:
                traj.tools = tools
            return None
        if tools:
            joined.tools = tools
        return joined
    history = History(messages=[*(dict(m) for m in request), reply], tools=tools)  # type: ignore[call-arg]
    traj.additional_histories.append(history)
    return history


def record_tool_result(
    tool_call_id: str, content: str, *, name: str | None = None, trajectory: Trajectory | None = None
) -> None:
    """Append a tool message to the history whose last assistant turn made that call."""
    traj = trajectory if trajectory is not None else _current.get()
    if traj is None:
        return
    _tracing.on_tool_result(traj, tool_call_id, name)
    message: Message = {"role": "tool", "tool_call_id": tool_call_id, "content": content}
    if name is not None:
        message["name"] = name
    for turns in [traj.turns, *(h.turns for h in traj.additional_histories)]:
        for m in reversed(turns):
            if m.get("role") == "assistant":
                if any(c.get("id") == tool_call_id for c in m.get("tool_calls") or []):
                    turns.append(message)
                    return
                break
    traj.turns.append(message)


@contextlib.contextmanager
def node(name: str | None) -> Iterator[None]:
    """Tag every turn captured in the block with a graph node name."""
    token = _node.set(name)
    try:
        yield
    finally:
        _node.reset(token)


def sample_from_choice(choice: dict[str, Any], *, model: str | None = None) -> Sample | None:
    """Read the sampled token ids and logprobs out of a chat completion choice (a dict).

    Token ids come from ``choice["token_ids"]`` (vLLM's ``return_token_ids`` and ART's server), or
    from logprob tokens written as ``token_id:N`` (``return_tokens_as_token_ids``), which survive
    clients that drop unknown fields. Returns None when the choice carries neither.
    """
    tokens = sampled_tokens(choice)
    if tokens is None:
        return None
    return Sample(token_ids=tokens[0], logprobs=tokens[1], step=choice.get("art_step"), model=model)
