"""Trajectories: what one rollout of an agent said, did and earned.

A message is a plain OpenAI-format dict (``role``, ``content``, ``tool_calls``, ``tool_call_id``...).
An assistant turn that the trainable model sampled also carries a ``"sample"`` key (see `Sample`):
the exact token ids, their logprobs, the checkpoint step and the graph node. `messages()` strips it,
so what it returns can be sent back to any OpenAI-compatible API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import traceback
import uuid
from collections.abc import Awaitable, Generator, Iterable, Iterator
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

logger = logging.getLogger(__name__)

Message = dict[str, Any]
Tool = dict[str, Any]

SAMPLE_KEY = "sample"


class Sample(BaseModel):
    """What the sampler produced for one assistant turn."""

    token_ids: list[int]
    logprobs: list[float] | None = None
    step: int | None = None  # checkpoint step that produced the turn
    node: str | None = None  # graph node that made the call (art_graph)
    model: str | None = None  # served model name the turn came from

    @model_validator(mode="after")
    def _lengths_match(self) -> Sample:
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"sample has {len(self.token_ids)} token ids but {len(self.logprobs)} logprobs; "
                "pass one logprob per sampled token (or none)"
            )
        return self


def sample_dict(
    token_ids: list[int],
    logprobs: list[float] | None = None,
    *,
    step: int | None = None,
    node: str | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """A `Sample` in the form a turn stores it (``model_dump(exclude_none=True)``), without validation.

    For values already checked (a capture hot path); anything else goes through `Sample`.
    """
    out: dict[str, Any] = {"token_ids": token_ids}
    if logprobs is not None:
        out["logprobs"] = logprobs
    if step is not None:
        out["step"] = step
    if node is not None:
        out["node"] = node
    if model is not None:
        out["model"] = model
    return out


def assistant_turn(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    token_ids: list[int] | None = None,
    logprobs: list[float] | None = None,
    step: int | None = None,
    node: str | None = None,
    model: str | None = None,
) -> Message:
    """Build an assistant message; with ``token_ids`` it is marked as sampled by the trainable model."""
    message: Message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if token_ids is not None:
        sample = Sample(token_ids=token_ids, logprobs=logprobs, step=step, node=node, model=model)
        message[SAMPLE_KEY] = sample.model_dump(exclude_none=True)
    return message


def message_sample(message: Message) -> Sample | None:
    """The `Sample` of a trainable assistant turn, or None for context."""
    raw = message.get(SAMPLE_KEY)
    return Sample.model_validate(raw) if raw is not None else None


def clean_message(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != SAMPLE_KEY}


def sampled_tokens(choice: dict[str, Any]) -> tuple[list[int], list[float] | None] | None:
    """The token ids and logprobs of `sample_from_choice`, as plain lists (no validation)."""
    content = ((choice.get("logprobs") or {}).get("content")) or []
    token_ids = choice.get("token_ids")
    logprobs = [float(c["logprob"]) for c in content] or None
    if token_ids is None and content:
        token_ids = _ids_from_logprob_tokens(content)
    if token_ids is None:
        return None
    if logprobs is not None and len(logprobs) != len(token_ids):
        logger.warning("choice has %d token ids but %d logprobs; dropping logprobs", len(token_ids), len(logprobs))
        logprobs = None
    return list(token_ids), logprobs


def _ids_from_logprob_tokens(content: list[dict[str, Any]]) -> list[int] | None:
    """Token ids from logprob tokens written as ``token_id:N``; None unless every token is."""
    ids = []
    for c in content:
        t = c.get("token")
        if type(t) is not str or not t.startswith("token_id:") or not t[9:].isdecimal():
            return None
        ids.append(int(t[9:]))
    return ids


def as_message(item: Any, index: int | None = None) -> Message:
    """A message dict from what users put in a history: a dict, an OpenAI SDK message, or an OpenAI
    `Choice` (OpenPipe ART's ``messages_and_choices`` holds them: a choice is the trainable model's
    turn; its token ids and logprobs, when it carries them, become the turn's sample)."""
    if type(item) is dict:
        return item
    where = f"message {index}" if index is not None else "a message"
    if isinstance(item, dict):
        return dict(item)
    if hasattr(item, "message") and hasattr(item, "finish_reason") and hasattr(item, "model_dump"):  # a Choice
        message: dict[str, Any] = item.message.model_dump(exclude_none=True)
        message["role"] = "assistant"
        tokens = sampled_tokens(item.model_dump())
        if tokens is not None:
            message[SAMPLE_KEY] = sample_dict(tokens[0], tokens[1], step=getattr(item, "art_step", None))
        return message
    if hasattr(item, "model_dump") and hasattr(item, "role"):  # ChatCompletionMessage and friends
        dumped: dict[str, Any] = item.model_dump(exclude_none=True)
        return dumped
    raise TypeError(
        f"{where} is a {type(item).__name__}; a history holds OpenAI-format message dicts, OpenAI SDK "
        "messages or Choice objects (from response.choices)"
    )


class Turns(list):  # type: ignore[type-arg]
    """The turns of a history: a list that converts what is added (see `as_message`) and refuses
    what it cannot use, at the moment it is added rather than later in `messages()` or a judge."""

    def append(self, item: Any) -> None:
        super().append(item if type(item) is dict else as_message(item, len(self)))

    def extend(self, items: Iterable[Any]) -> None:
        super().extend(m if type(m) is dict else as_message(m) for m in items)

    def insert(self, index: Any, item: Any) -> None:
        super().insert(index, as_message(item))

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, [as_message(m) for m in value])
        else:
            super().__setitem__(index, as_message(value))

    def __iadd__(self, items: Iterable[Any]) -> Turns:  # type: ignore[misc]  # list's takes only lists
        self.extend(items)
        return self


def _check_messages(messages: list[Any]) -> list[Message]:
    messages = Turns(as_message(m, i) for i, m in enumerate(messages))
    for i, message in enumerate(messages):
        if message.get("role") not in {"system", "developer", "user", "assistant", "tool", "function"}:
            raise ValueError(f"message {i} has no valid 'role' (got {message.get('role')!r})")
        if SAMPLE_KEY in message:
            if message["role"] != "assistant":
                raise ValueError(f"message {i}: only assistant turns can carry a sample")
            Sample.model_validate(message[SAMPLE_KEY])
    return messages


class History(BaseModel):
    """One conversation: messages plus the tools the model was offered.

    ``messages_and_choices`` (OpenPipe ART's name) is accepted for ``messages``, and OpenAI
    `Choice` objects among them become assistant turns. Unknown fields are refused.
    """

    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, serialize_by_alias=True, extra="forbid"
    )

    turns: list[Any] = Field(
        default_factory=Turns,
        alias="messages",
        validation_alias=AliasChoices("messages", "messages_and_choices", "turns"),
    )
    tools: list[Tool] | None = None

    _validate_turns = field_validator("turns")(classmethod(lambda cls, v: _check_messages(v)))

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = {"messages", "messages_and_choices", "turns"} | set(cls.model_fields)
            unknown = sorted(str(k) for k in data if k not in known)
            if unknown:
                raise ValueError(
                    f"{cls.__name__} has no field {', '.join(map(repr, unknown))}; its fields are "
                    f"{', '.join(['messages', *(f for f in cls.model_fields if f != 'turns')])} "
                    "(messages_and_choices is accepted for messages)"
                )
        return data

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("turns", "messages_and_choices"):
            name, value = "turns", _check_messages(list(value))
        super().__setattr__(name, value)

    @property
    def messages_and_choices(self) -> list[Message]:
        """OpenPipe ART's name for the turns (the same list)."""
        return self.turns

    def messages(self) -> list[Message]:
        """The messages as plain OpenAI dicts, without sampling data."""
        return [clean_message(m) for m in self.turns]

    def samples(self) -> Iterator[tuple[int, Sample]]:
        for i, m in enumerate(self.turns):
            if SAMPLE_KEY in m:
                yield i, Sample.model_validate(m[SAMPLE_KEY])


class Trajectory(History):
    """One rollout: the main history, any additional histories, and the reward it earned.

    Example:
        traj = Trajectory(messages=[{"role": "user", "content": "2+2?"}], reward=0.0)
        traj.turns.append(assistant_turn("4", token_ids=[19, 2], logprobs=[-0.1, -0.2]))
        traj.reward = 1.0
    """

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    additional_histories: list[History] = Field(default_factory=list)
    reward: float = 0.0
    metrics: dict[str, float | int | bool] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)
    start_time: float = Field(default_factory=time.time)
    end_time: float | None = None

    @model_validator(mode="after")
    def _finite_reward(self) -> Trajectory:
        if not math.isfinite(self.reward):
            raise ValueError(
                f"trajectory {self.id} has reward {self.reward}; rewards must be finite numbers "
                "(check the reward function for a division by zero or a missing score)"
            )
        for key, value in self.metrics.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"trajectory {self.id} has metric {key}={value}; metrics must be finite")
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "reward":
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"trajectory {self.id} got reward {value}; rewards must be finite numbers")
        super().__setattr__(name, value)

    def histories(self) -> list[History]:
        """The main history followed by the additional ones."""
        return [History(messages=self.turns, tools=self.tools), *self.additional_histories]  # type: ignore[call-arg]

    def log(self, message: str) -> None:
        self.logs.append(message)

    def finish(self) -> Trajectory:
        """Mark the rollout as finished (records `end_time` and a `duration_s` metric)."""
        self.end_time = time.time()
        self.metrics["duration_s"] = round(self.end_time - self.start_time, 6)
        return self

    @property
    def duration_s(self) -> float:
        return (self.end_time or time.time()) - self.start_time

    @contextlib.contextmanager
    def timer(self, name: str) -> Iterator[None]:
        """Add the seconds spent in the block to ``metrics[f"time/{name}_s"]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            key = f"time/{name}_s"
            self.metrics[key] = float(self.metrics.get(key, 0.0)) + time.perf_counter() - t0


class RolloutError(BaseModel):
    """An exception raised by a rollout, kept on its group rather than lost."""

    type: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> RolloutError:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type=type(exc).__name__, message=str(exc), traceback=tb)


class TrajectoryGroup(BaseModel):
    """Several rollouts of the same task; rewards are compared within a group.

    Built from finished trajectories or from awaitables that produce them (resolved by
    `gather_trajectory_groups` or by awaiting the group).

    Example:
        group = TrajectoryGroup(rollout(model, task) for _ in range(4))
        group = await group
    """

    trajectories: list[Trajectory] = Field(default_factory=list)
    exceptions: list[RolloutError] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, float | int | bool] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)

    _pending: list[Awaitable[Trajectory]] = PrivateAttr(default_factory=list)

    def __init__(
        self,
        trajectories: Iterable[Trajectory | Awaitable[Trajectory] | dict[str, Any]] = (),
        **data: Any,
    ) -> None:
        done: list[Any] = []
        pending: list[Awaitable[Trajectory]] = []
        for item in trajectories:
            if inspect_awaitable(item):
                pending.append(item)  # type: ignore[arg-type]  # inspect_awaitable checked it
            else:
                done.append(item)
        super().__init__(trajectories=done, **data)
        self._pending = pending

    @property
    def pending(self) -> int:
        return len(self._pending)

    def take_pending(self) -> list[Awaitable[Trajectory]]:
        pending, self._pending = self._pending, []
        return pending

    def add_result(self, result: Trajectory | BaseException) -> None:
        if isinstance(result, BaseException):
            self.exceptions.append(RolloutError.from_exception(result))
        elif isinstance(result, Trajectory):
            self.trajectories.append(result)
        else:
            self.exceptions.append(
                RolloutError(
                    type="TypeError",
                    message=f"a rollout returned {type(result).__name__}; rollouts must return a Trajectory",
                )
            )

    def __await__(self) -> Generator[Any, None, TrajectoryGroup]:
        async def resolve() -> TrajectoryGroup:
            results = await asyncio.gather(*self.take_pending(), return_exceptions=True)
            for result in results:
                self.add_result(result)
            return self

        return resolve().__await__()

    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]


def inspect_awaitable(item: Any) -> bool:
    return not isinstance(item, (Trajectory, dict)) and hasattr(item, "__await__")
