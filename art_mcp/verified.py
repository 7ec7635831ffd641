"""Verifiable AutoRL: tasks with known answers, from an MCP server's tool schemas alone.

No dataset and no LLM. Tool calls are sampled from the tools' input schemas (`schema_sample`) in a
random walk through a fresh server (the gold run); each successful call becomes a task whose
reward is checked against that run:

- an *answer* task (the call changed no state the server's read tools can see): the agent's final
  answer must hold the gold result's values (numbers within rounding, strings as written);
- a *state* task (the call changed that state): the server's state after the agent's run, read back
  with the server's own read tools, must equal the state after the gold run.

A task replays the walk's earlier state-changing calls (``setup``) in the agent's fresh server
before the agent starts, so ``update the note with id 2`` finds note 2 there. The *read tools*
are those annotated ``readOnlyHint`` (or, without annotations, named ``get_``/``list_``/``search_``
...); the state is every read tool that needs no arguments, and every one-argument read tool called
with the ids those returned (``get_note(note_id)`` for each ``id`` that ``list_notes`` shows).
State those tools cannot see is not checked.

Deterministic servers only: every walk is replayed in a second fresh server, and if any call's
result or any state read differs between the two runs, `NonDeterministicServer` is raised.

The gold runs also give SFT warm-up traces (`gold_trajectory`): the call, its result, and
`complete_task` with the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from art_core import Model, Trajectory

from . import compat
from .agent import COMPLETE_TASK, COMPLETE_TASK_TOOL, rollout
from .autorl import Task
from .compat import mcp_types
from .pool import ServerPool
from .schema_sample import Sampler, SchemaError, ValuePool
from .session import McpSession, ServerSpec, ToolResult, connect

logger = logging.getLogger(__name__)

READ_VERBS = ("get", "list", "read", "search", "find", "show", "describe", "count", "fetch", "query", "view",
              "lookup", "stat", "info", "directory")  # fmt: skip
MAX_GETS = 20  # one-argument read calls per state read, at most
MAX_LEAVES = 20  # values of a gold result an answer is checked for, at most


class NonDeterministicServer(RuntimeError):
    """Two gold runs of the same calls in fresh servers disagreed: rewards cannot be checked."""


class Call(BaseModel):
    """One tool call: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any] = {}


class VerifiedTask(Task):
    """A task with its gold run: the call that does it, what it returned, and the state it left."""

    call: Call
    kind: Literal["answer", "state"]
    gold: Any = None  # the gold call's result (structured content, JSON, or text)
    state: dict[str, Any] = {}  # state after the gold run (state tasks)
    setup: list[Call] = []  # run in the agent's fresh server before it starts


# --- the server's state, read back with its own read tools ---------------------------------------


def is_read_tool(tool: mcp_types.Tool) -> bool:
    """Annotated read-only, or (no annotation) named like a reader: ``get_x``, ``list_x``, ``search``..."""
    hint = compat.read_only_hint(tool)
    if hint is not None:
        return bool(hint)
    first = re.split(r"[_\-]|(?<=[a-z])(?=[A-Z])", tool.name)[0].lower()
    return first in READ_VERBS


def _required(tool: mcp_types.Tool) -> list[str]:
    return list((compat.input_schema(tool) or {}).get("required", []))


@dataclass(frozen=True)
class StatePlan:
    """Which read tools make up the server's state: `listers` take no arguments; each of `getters`
    takes one, fed the values the listers returned under a matching key."""

    listers: tuple[str, ...] = ()
    getters: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, tools: Sequence[mcp_types.Tool]) -> StatePlan:
        reads = [t for t in tools if is_read_tool(t)]
        listers = tuple(t.name for t in reads if not _required(t))
        getters = tuple((t.name, _required(t)[0]) for t in reads if len(_required(t)) == 1)
        return cls(listers, getters if listers else ())

    def __bool__(self) -> bool:
        return bool(self.listers)


def result_value(result: ToolResult) -> Any:
    """A result as data: its structured content, its text parsed as JSON, or its text."""
    if result.is_error:
        return {"error": result.text}
    if result.structured is not None:
        return result.structured
    try:
        return json.loads(result.text)
    except ValueError:
        return result.text


async def read_state(session: McpSession, plan: StatePlan) -> dict[str, Any]:
    """The server's state as its read tools show it: ``{"list_notes": [...], "get_note(note_id=1)": {...}}``."""
    state: dict[str, Any] = {}
    pool = ValuePool()
    for name in plan.listers:
        state[name] = result_value(await session.call(name, {}))
        pool.add(state[name])
    for name, param in plan.getters:
        values = sorted({v for v in pool.matching(param) if isinstance(v, (int, str))}, key=str)[:MAX_GETS]
        for v in values:
            state[f"{name}({param}={json.dumps(v)})"] = result_value(await session.call(name, {param: v}))
    return state


# --- gold runs --------------------------------------------------------------------------------------


@dataclass
class Step:
    call: Call
    value: Any
    is_error: bool
    changed: bool  # the state differs from the one before this call
    state: dict[str, Any] = field(default_factory=dict)  # after this call


def _walk_tools(tools: Sequence[mcp_types.Tool], only: Collection[str] | None) -> list[mcp_types.Tool]:
    """The tools a walk samples calls of: all but `complete_task`, or the ones `only` names."""
    usable = [t for t in tools if t.name != COMPLETE_TASK]
    if only is None:
        return usable
    names = {t.name for t in usable}
    if unknown := sorted(set(only) - names):
        raise ValueError(
            f"the server has no tool named {', '.join(map(repr, unknown))}; its tools: {', '.join(sorted(names))}"
        )
    return [t for t in usable if t.name in only]


async def _explore(
    session: McpSession, plan: StatePlan, rng: random.Random, length: int, only: Collection[str] | None = None
) -> list[Step]:
    """A random walk of `length` sampled calls; values each result shows feed later arguments."""
    pool = ValuePool()
    tools = _walk_tools(session.tools, only)
    before = await read_state(session, plan)
    pool.add(before)
    steps: list[Step] = []
    for _ in range(3 * length):  # failed calls are kept (and replayed) but do not count
        if sum(not s.is_error for s in steps) >= length:
            break
        tool = rng.choice(tools)
        try:
            args = Sampler(compat.input_schema(tool) or {}, description=tool.description, rng=rng).arguments(
                pool
            )
        except SchemaError as exc:
            logger.info("skipping tool %s: %s", tool.name, exc)
            continue
        steps.append(await _step(session, plan, Call(name=tool.name, arguments=args), before))
        before = steps[-1].state
        if not steps[-1].is_error:
            pool.add(steps[-1].value)
            pool.add(before)
    return steps


async def _step(session: McpSession, plan: StatePlan, call: Call, before: dict[str, Any]) -> Step:
    result = await session.call(call.name, call.arguments)
    after = await read_state(session, plan)
    return Step(call, result_value(result), result.is_error, after != before, after)


async def _replay(session: McpSession, plan: StatePlan, calls: list[Call]) -> list[Step]:
    before = await read_state(session, plan)
    steps = []
    for call in calls:
        steps.append(await _step(session, plan, call, before))
        before = steps[-1].state
    return steps


def _disagreement(a: list[Step], b: list[Step]) -> str | None:
    for x, y in zip(a, b, strict=True):
        call = f"{x.call.name}({json.dumps(x.call.arguments)[1:-1]})"
        if x.is_error != y.is_error or (not x.is_error and x.value != y.value):  # error texts may vary
            return f"{call} returned {_short(x.value)} in one run and {_short(y.value)} in the other"
        if x.state != y.state:
            key = next(k for k in {*x.state, *y.state} if x.state.get(k) != y.state.get(k))
            return (f"after {call}, {key} read {_short(x.state.get(key))} in one run and "
                    f"{_short(y.state.get(key))} in the other")  # fmt: skip
    return None


def _short(value: Any, n: int = 120) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= n else text[:n] + "..."


async def gold_walk(
    server: ServerSpec, rng: random.Random, length: int, *, timeout: float = 30.0,
    tools: Collection[str] | None = None,
) -> tuple[list[Step], list[mcp_types.Tool]]:  # fmt: skip
    """One random walk in a fresh server, replayed in a second one; `NonDeterministicServer` if they
    disagree. `tools` limits the sampled calls to those tools (the state is read with every read
    tool). Returns the walk's steps and the server's tools."""
    async with connect(server, timeout=timeout) as session:
        server_tools = session.tools
        plan = StatePlan.of(server_tools)
        steps = await _explore(session, plan, rng, length, tools)
    async with connect(server, timeout=timeout) as session:
        again = await _replay(session, plan, [s.call for s in steps])
    if (why := _disagreement(steps, again)) is not None:
        raise NonDeterministicServer(
            f"the MCP server {session.label} is not deterministic: {why}. Verified tasks need a server "
            "whose fresh copies answer the same calls the same way (no clocks, random ids or outside "
            "data); leave the tool that differs out (art autorl --tools NAME,...) or score this server "
            "with a judge instead (art autorl --judge MODEL)"
        )
    return steps, server_tools


# --- tasks -----------------------------------------------------------------------------------------


def _words(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|[_\-]+", " ", name).strip().lower()


def _gist(description: str | None) -> str:
    """The description's first clause, without its examples."""
    if not description:
        return ""
    first = re.split(r"(?<=[.;:])\s|\n|,? e\.g\.|\s\(", description.strip())[0].strip().rstrip(".;:,")
    return first[:160]


def word_task(call: Call, kind: str, description: str | None = None) -> str:
    """A task worded from the tool's name and description: ``Calculate (evaluate an arithmetic
    expression) with expression "6 * 7", and reply with the result.``"""
    args = ", ".join(f"{_words(k)} {json.dumps(v)}" for k, v in call.arguments.items())
    gist = _gist(description)
    text = _words(call.name).capitalize()
    if gist:
        text += f" ({gist[0].lower()}{gist[1:]})"
    if args:
        text += f" with {args}"
    return text + (", and reply with the result." if kind == "answer" else ".")


def _checkable(value: Any) -> bool:
    return bool(leaves(value)) and not (isinstance(value, dict) and set(value) == {"error"})


def tasks_from_walk(
    steps: list[Step], descriptions: dict[str, str | None], stateful: bool
) -> list[VerifiedTask]:
    """One task per successful call of a gold walk; earlier state-changing calls become its setup."""
    tasks = []
    for i, step in enumerate(steps):
        kind = "state" if step.changed else "answer"
        if step.is_error or (kind == "answer" and not _checkable(step.value)):
            continue
        setup = [s.call for s in steps[:i] if s.changed] if stateful else []
        key = json.dumps([[c.model_dump() for c in setup], step.call.model_dump()], sort_keys=True)
        tasks.append(
            VerifiedTask(
                id=hashlib.sha1(key.encode()).hexdigest()[
                    :10
                ],  # the same words after another setup: another task
                task=word_task(step.call, kind, descriptions.get(step.call.name)),
                difficulty=min(5, 1 + (kind == "state") + len(setup) // 3),
                tools=[step.call.name],
                call=step.call,
                kind=kind,
                gold=step.value,
                state=step.state if kind == "state" else {},
                setup=setup,
            )
        )
    return tasks


async def generate_verified_tasks(
    server: ServerSpec,
    n: int,
    *,
    seed: int = 0,
    walk_length: int = 6,
    max_walks: int | None = None,
    timeout: float = 30.0,
    tools: Collection[str] | None = None,
) -> list[VerifiedTask]:
    """`n` verified tasks from random walks through fresh copies of `server` (see the module docstring).

    Each walk starts two server processes (the gold run and its replay). Tasks repeating an earlier
    one (the same setup and call) are dropped. `tools` names the only tools whose calls are sampled
    (leave out one that reads a clock, say); `ValueError` names the server's tools if one is unknown.
    Raises `NonDeterministicServer` when a replay disagrees, and `ValueError` when no sampled call
    succeeds.

    Example:
        tasks = await generate_verified_tasks("python -m art_mcp.servers.calculator", 40, seed=0)
        train, val = art_mcp.split_tasks(tasks, val_fraction=0.25)
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = random.Random(seed)
    max_walks = max_walks or max(8, 4 * math.ceil(n / walk_length))
    kept: dict[str, VerifiedTask] = {}
    calls = errors = 0
    for _ in range(max_walks):
        if len(kept) >= n:
            break
        steps, server_tools = await gold_walk(
            server, random.Random(rng.getrandbits(64)), walk_length, timeout=timeout, tools=tools
        )
        descriptions = {t.name: t.description for t in server_tools}
        calls += len(steps)
        errors += sum(s.is_error for s in steps)
        for task in tasks_from_walk(steps, descriptions, bool(StatePlan.of(server_tools))):
            if task.id not in kept and len(kept) < n:
                kept[task.id] = task
    logger.info("verified tasks: %d kept from %d sampled calls (%d errors)", len(kept), calls, errors)
    if not kept:
        raise ValueError(
            f"none of {calls} sampled calls to {server!r} succeeded ({errors} errors); the log (-v) shows the "
            "calls and errors. Tools whose arguments cannot be guessed from their schemas need --tasks FILE"
        )
    if len(kept) < n:
        logger.warning(
            "made %d of the %d verified tasks asked for (raise the walks, or ask for fewer)", len(kept), n
        )
    return list(kept.values())


# --- rewards ---------------------------------------------------------------------------------------


def leaves(value: Any) -> list[Any]:
    """The scalar values in a result (at most `MAX_LEAVES`), the things an answer must mention."""
    out: list[Any] = []

    def walk(v: Any) -> None:
        if len(out) >= MAX_LEAVES:
            return
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str):
            if v.strip():
                out.append(v.strip())
        elif v is not None:
            out.append(v)

    walk(value)
    return out


_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _number_in(gold: float, answer: str) -> bool:
    """A number in `answer` equals `gold`, to the decimals it is written with (within 1%)."""
    for text in _NUM.findall(answer.replace(",", "")):
        got = float(text)
        decimals = len(text.split(".")[1]) if "." in text and "e" not in text.lower() else 0
        slack = max(0.5 * 10**-decimals, 1e-9)
        if abs(got - gold) <= slack and abs(got - gold) <= 0.01 * abs(gold) + 1e-9:
            return True
    return False


def answer_score(gold: Any, answer: str | None) -> float:
    """The share of the gold result's values that the answer holds (numbers within rounding, strings as written)."""
    wanted = leaves(gold)
    if not wanted:
        raise ValueError(f"the gold result {gold!r} holds no value to check an answer against")
    text = " ".join((answer or "").split()).lower()
    found = 0
    for v in wanted:
        if isinstance(v, bool):
            found += str(v).lower() in text or ("yes" if v else "no") in text.split()
        elif isinstance(v, (int, float)):
            found += _number_in(float(v), text)
        else:
            found += " ".join(str(v).split()).lower() in text
    return found / len(wanted)


def score(task: VerifiedTask, final_answer: str | None, state: dict[str, Any] | None) -> float:
    """The reward of a run of `task`: the state after it equals the gold state (state tasks, 1 or 0),
    or the share of gold values its final answer holds (answer tasks)."""
    if task.kind == "state":
        if state is None:
            raise ValueError(f"task {task.id} is a state task; pass the state read after the agent's run")
        return float(state == task.state)
    return answer_score(task.gold, final_answer)


async def verified_rollout(
    model: Model, pool: ServerPool, task: VerifiedTask, **rollout_kwargs: Any
) -> Trajectory:
    """`art_mcp.rollout` in a fresh server with the task's setup replayed first, scored against its gold run.

    The reward lands in ``trajectory.reward`` (and ``metrics["verified"]``); ``metadata["state"]``
    holds the state read back after a state task. The pool must give each rollout its own server
    (``isolation="per_rollout"``) when any task has setup calls or is a state task.
    """
    async with pool.session() as session:
        for call in task.setup:  # outside the trajectory: the agent starts from this state
            result = await session.call(call.name, call.arguments)
            if result.is_error:
                logger.warning("task %s: setup call %s failed: %s", task.id, call.name, result.text)
        traj = await rollout(model, session, task, **rollout_kwargs)
        state = await read_state(session, StatePlan.of(session.tools)) if task.kind == "state" else None
    traj.reward = score(task, traj.metadata.get("final_answer"), state)
    traj.metrics["verified"] = traj.reward
    traj.metadata["kind"] = task.kind
    if state is not None:
        traj.metadata["state"] = state
    return traj


def gold_trajectory(
    task: VerifiedTask, tools: list[dict[str, Any]], system_prompt: str | None = None
) -> Trajectory:
    """The gold run as an SFT example: the call, its result, then `complete_task` with the answer."""
    from .agent import DEFAULT_SYSTEM_PROMPT

    result = task.gold if isinstance(task.gold, str) else json.dumps(task.gold)
    answer = result if task.kind == "answer" else "Done."
    if task.kind == "answer" and isinstance(task.gold, dict) and len(task.gold) == 1:
        only = next(iter(task.gold.values()))  # {"result": 42.0}: answer the value
        answer = only if isinstance(only, str) else json.dumps(only)

    def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        fn = {"name": name, "arguments": json.dumps(arguments)}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": fn}],
        }

    messages = [
        {"role": "system", "content": system_prompt or DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": task.task},
        call("call_0", task.call.name, task.call.arguments),
        {"role": "tool", "tool_call_id": "call_0", "name": task.call.name, "content": result},
        call("call_1", COMPLETE_TASK, {"answer": answer}),
    ]
    names = {t["function"]["name"] for t in tools}
    return Trajectory(  # type: ignore[call-arg]  # the pydantic plugin misses the messages alias
        messages=messages, tools=[*tools, *([] if COMPLETE_TASK in names else [COMPLETE_TASK_TOOL])]
    )


# --- wording by an LLM -----------------------------------------------------------------------------

REWORD_PROMPT = """Rewrite this instruction as the request a user would type to an assistant. Keep every
value exactly as written (numbers, names, quoted text); do not name the tool. Reply with the request only.

Instruction: {task}"""


def _values(call: Call) -> list[str]:
    return [str(v) for v in leaves(call.arguments)]


async def reword_tasks(tasks: list[VerifiedTask], generator: str, *, litellm_params: dict[str, Any] | None = None,
                       concurrency: int = 8) -> list[VerifiedTask]:  # fmt: skip
    """Tasks reworded by an LLM as a user would ask; a rewording that drops an argument value keeps the template."""
    from .autorl import import_litellm

    litellm = import_litellm()
    gate = asyncio.Semaphore(concurrency)

    async def one(task: VerifiedTask) -> VerifiedTask:
        async with gate:
            response = await litellm.acompletion(
                model=generator,
                messages=[{"role": "user", "content": REWORD_PROMPT.format(task=task.task)}],
                **(litellm_params or {}),
            )
        text = " ".join((response.choices[0].message.content or "").split())
        missing = [v for v in _values(task.call) if v.lower() not in text.lower()]
        if len(text) < 12 or missing:
            logger.info(
                "keeping the template for %s (the rewording dropped %s)", task.id, missing or "everything"
            )
            return task
        return task.model_copy(update={"task": text})

    return list(await asyncio.gather(*(one(t) for t in tasks)))


# --- files -----------------------------------------------------------------------------------------


def load_verified_tasks(path: str | Path) -> list[VerifiedTask]:
    """Read verified tasks written by `art_mcp.save_tasks`."""
    tasks = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                tasks.append(VerifiedTask.model_validate_json(line))
            except ValidationError as exc:
                raise ValueError(
                    f"{path}:{i} is not a verified task ({exc.errors()[0]['msg']}); verified tasks carry "
                    "'call', 'kind' and 'gold' (written by art autorl without --judge)"
                ) from None
    return tasks


__all__ = [
    "Call",
    "NonDeterministicServer",
    "StatePlan",
    "VerifiedTask",
    "answer_score",
    "generate_verified_tasks",
    "gold_trajectory",
    "gold_walk",
    "is_read_tool",
    "leaves",
    "load_verified_tasks",
    "read_state",
    "result_value",
    "reword_tasks",
    "score",
    "tasks_from_walk",
    "verified_rollout",
    "word_task",
]
