"""SFT data: JSONL files of conversations, checked on load, and batches with a learning-rate schedule.

One record per line, in the OpenAI chat fine-tuning shape:

    {"messages": [{"role": "system", ...}, {"role": "user", ...}, {"role": "assistant", ...}, ...],
     "tools": [{"type": "function", "function": {"name": ..., "parameters": {...}}}],
     "metadata": {...}}

`load_sft_jsonl` rejects a record that would train the wrong thing, naming the file and line: broken
JSON, no final assistant turn, a tool call to a tool the record does not offer, tool-call arguments
that are not a JSON object, a tool result that answers no call.

Masking: with ``mask="last"`` every assistant turn but the last gets ``"weight": 0`` (as in OpenAI's
fine-tuning format), so only the last turn is a target; ``mask="all"`` (the default) trains every
assistant turn. `iterate_sft` walks the data in batches over epochs, each with the learning rate of
its step under a constant, linear or cosine schedule with linear warm-up; train each batch with
``model.train_sft(batch.trajectories, SFTConfig(learning_rate=batch.learning_rate, ...))``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .trajectory import Message, Trajectory

__all__ = [
    "SFTBatch",
    "SFTDataError",
    "iterate_sft",
    "learning_rate_at",
    "load_sft_jsonl",
    "mask_turns",
    "validate_sft_record",
    "write_sft_jsonl",
]

Mask = Literal["all", "last"]
Schedule = Literal["constant", "linear", "cosine"]
ROLES = {"system", "developer", "user", "assistant", "tool"}
RECORD_KEYS = {"messages", "tools", "metadata"}


class SFTDataError(ValueError):
    """A record of an SFT file that cannot be trained on; the message names the file and line."""


def _problem(record: Any) -> str | None:
    """What is wrong with one record, or None."""
    if not isinstance(record, dict):
        return f"a record must be a JSON object with 'messages', got {type(record).__name__}"
    if unknown := set(record) - RECORD_KEYS:
        return f"unknown keys {sorted(unknown)}; a record has 'messages', optional 'tools' and 'metadata'"
    messages, tools = record.get("messages"), record.get("tools")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list of chat messages"
    names: set[str] = set()
    if tools is not None:
        if not isinstance(tools, list):
            return "'tools' must be a list of OpenAI function tools"
        for j, tool in enumerate(tools):
            name = tool.get("function", {}).get("name") if isinstance(tool, dict) else None
            if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(name, str):
                return f"tools[{j}] is not an OpenAI function tool ({{'type': 'function', 'function': {{'name': ...}}}})"
            names.add(name)
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            role = m.get("role") if isinstance(m, dict) else m
            return f"messages[{i}] has no valid role (got {role!r}); use one of {sorted(ROLES)}"
        if "weight" in m and (m["role"] != "assistant" or m["weight"] not in (0, 1)):
            return f"messages[{i}]: 'weight' must be 0 or 1, and only on assistant turns"
        if m["role"] == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in open_calls:
                return (
                    f"messages[{i}] is a tool result for {call_id!r}, which no earlier assistant turn called"
                )
            open_calls.discard(call_id)
        if m["role"] != "assistant":
            continue
        calls = m.get("tool_calls") or []
        if not isinstance(calls, list):
            return f"messages[{i}]: 'tool_calls' must be a list"
        if not calls and not isinstance(m.get("content"), str):
            return f"messages[{i}] is an assistant turn with neither text content nor tool calls"
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                return f"messages[{i}] has a tool call without function.name"
            if fn["name"] not in names:
                offered = ", ".join(sorted(names)) or "none"
                return f"messages[{i}] calls unknown tool {fn['name']!r}; the record's tools are: {offered}"
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError as exc:
                    return f"messages[{i}]: the arguments of {fn['name']!r} are not valid JSON ({exc})"
            if not isinstance(args, dict):
                return f"messages[{i}]: the arguments of {fn['name']!r} must be a JSON object"
            if isinstance(call.get("id"), str):
                open_calls.add(call["id"])
    if messages[-1].get("role") != "assistant":
        return f"the last message is a {messages[-1].get('role')!r} turn; a record must end with the assistant turn to learn"
    return None


def validate_sft_record(record: Any, *, where: str = "record") -> None:
    """Raise `SFTDataError` (prefixed with `where`, e.g. ``"data.jsonl:12"``) if the record is unusable."""
    if (problem := _problem(record)) is not None:
        raise SFTDataError(f"{where}: {problem}")


def mask_turns(messages: list[Message], mask: Mask) -> list[Message]:
    """Copies of the messages with ``weight`` set: every assistant turn (``"all"``) or only the last (``"last"``)."""
    if mask not in ("all", "last"):
        raise ValueError(f"mask must be 'all' or 'last', got {mask!r}")
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    out = []
    for i, m in enumerate(messages):
        m = dict(m)
        if m.get("role") == "assistant" and mask == "last" and i != last:
            m["weight"] = 0
        out.append(m)
    return out


def load_sft_jsonl(path: str | Path, *, mask: Mask = "all") -> list[Trajectory]:
    """Read and check an SFT file; each record becomes a `Trajectory` (metadata ``source`` = "file:line").

    Raises `SFTDataError` at the first bad record, naming the file and line.

    Example:
        data = load_sft_jsonl("teacher.jsonl", mask="last")
    """
    path = Path(path)
    out: list[Trajectory] = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise SFTDataError(
                    f"{where}: not valid JSON ({exc}); write one JSON object per line"
                ) from None
            validate_sft_record(record, where=where)
            metadata = {**(record.get("metadata") or {}), "source": where}
            out.append(Trajectory(messages=mask_turns(record["messages"], mask),  # type: ignore[call-arg]
                                  tools=record.get("tools"), metadata=metadata))
    if not out:
        raise SFTDataError(f"{path}: no records; write one JSON object with 'messages' per line")
    return out


def write_sft_jsonl(path: str | Path, records: Iterable[Trajectory | dict[str, Any]]) -> int:
    """Write records (trajectories or dicts with 'messages') as JSONL, each checked first; returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            if isinstance(record, Trajectory):
                record = {"messages": record.messages(), "tools": record.tools, "metadata": record.metadata}
            record = {k: v for k, v in record.items() if v is not None}
            validate_sft_record(record, where=f"record {n}")
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n


def learning_rate_at(step: int, total_steps: int, peak_lr: float, schedule: Schedule = "cosine", *,
                     warmup_steps: int = 0, min_lr: float = 0.0) -> float:  # fmt: skip
    """The learning rate of optimizer step `step` (0-based) of `total_steps`.

    Linear warm-up from peak/warmup to `peak_lr` over `warmup_steps`, then constant, linear decay or
    cosine decay towards `min_lr` (the last step stays above it).
    """
    if not 0 <= step < total_steps:
        raise ValueError(f"step must be in [0, {total_steps}), got {step}")
    if schedule not in ("constant", "linear", "cosine"):
        raise ValueError(f"schedule must be 'constant', 'linear' or 'cosine', got {schedule!r}")
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return peak_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    if schedule == "linear":
        return peak_lr - (peak_lr - min_lr) * progress
    return min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass(frozen=True)
class SFTBatch:
    trajectories: list[Trajectory]
    step: int
    total_steps: int
    epoch: int
    learning_rate: float


def iterate_sft(
    data: Sequence[Trajectory],
    *,
    batch_size: int = 8,
    num_epochs: int = 1,
    peak_lr: float = 5e-5,
    schedule: Schedule = "cosine",
    warmup_ratio: float = 0.0,
    min_lr: float = 0.0,
    shuffle: bool = True,
    seed: int = 0,
    initial_step: int = 0,
) -> Iterator[SFTBatch]:
    """Batches of `batch_size` over `num_epochs`, each with its scheduled learning rate.

    Each epoch is shuffled with ``seed + epoch`` (a resumed run, `initial_step` > 0, sees the same
    order); the last batch of an epoch may be smaller.

    Example:
        for batch in iterate_sft(load_sft_jsonl("teacher.jsonl"), batch_size=8, num_epochs=2, peak_lr=2e-4):
            await model.train_sft(batch.trajectories, SFTConfig(learning_rate=batch.learning_rate,
                                                                batch_size=len(batch.trajectories)))
    """
    if batch_size < 1 or num_epochs < 1:
        raise ValueError(f"batch_size and num_epochs must be at least 1, got {batch_size} and {num_epochs}")
    if not 0 <= warmup_ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {warmup_ratio}")
    per_epoch = math.ceil(len(data) / batch_size)
    total = per_epoch * num_epochs
    warmup = math.ceil(warmup_ratio * total)
    step = 0
    for epoch in range(num_epochs):
        order = list(range(len(data)))
        if shuffle:
            random.Random(seed + epoch).shuffle(order)
        for b in range(per_epoch):
            if step >= initial_step:
                items = [data[i] for i in order[b * batch_size : (b + 1) * batch_size]]
                lr = learning_rate_at(step, total, peak_lr, schedule, warmup_steps=warmup, min_lr=min_lr)
                yield SFTBatch(items, step, total, epoch, lr)
            step += 1
