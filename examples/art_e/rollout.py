"""The ART-E agent: search and read the inbox over MCP until it hands in an answer.

The loop is `art_mcp.rollout`'s, with one change: it ends when the model calls the server's
`return_final_answer` (the generic loop ends on `complete_task`), and it stops at the first format
error (a reply without a tool call, an unknown tool, arguments that are not a JSON object), which
the reward scores lowest. Tool calls go through `art_mcp`'s session, so each is recorded in the
trajectory; chat completions are recorded by the model's capturing client.

Each inbox is served by its own server process (`InboxServers`). The database is read-only, so one
process per inbox is shared by all rollouts on it; ``isolation="per_rollout"`` gives every rollout
a fresh process instead (for a server variant that keeps per-session state).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters

import art_core as art
import art_mcp

from .inbox import Inbox, Question
from .reward import WRONG, Outcome, score

__all__ = [
    "FINAL_ANSWER",
    "SYSTEM_PROMPT",
    "InboxServers",
    "compact_tools",
    "opening_messages",
    "rollout",
    "server_params",
]

FINAL_ANSWER = "return_final_answer"
SERVER = Path(__file__).with_name("server.py")
EMAIL_ID = re.compile(r"\[([0-9a-f]{8})\]")
# The same for every inbox (the owner is named in the user's message), so every prompt starts with
# the same system prompt and tool specs: the trainer runs that shared prefix once per batch.
SYSTEM_PROMPT = (
    "You are an email assistant. Answer the user's question about their inbox using the tools. "
    "Search with search_emails using two or three distinctive keywords, read the emails that look relevant "
    "with read_email, then call return_final_answer with a short answer and the ids of the emails you used. "
    "Give only the value, written as in the email: a date, an amount, a name, a file name or a code. "
    'If the inbox does not say, answer "I don\'t know". Call exactly one tool per turn.'
)


def compact_schema(schema: Any) -> Any:
    """A JSON schema without what a model does not need: titles, `null` options, extra whitespace."""
    if isinstance(schema, list):
        return [compact_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: compact_schema(v) for k, v in schema.items() if k != "title"}
    if "anyOf" in out:
        options = [o for o in out["anyOf"] if o != {"type": "null"}]
        if len(options) == 1:
            out.pop("anyOf")
            out.update(options[0])
    if out.get("default", 0) is None:
        out.pop("default")
    return out


def compact_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool specs as short as they can be (they are in every prompt: 700 tokens -> about 300)."""
    out = []
    for tool in tools:
        fn = dict(tool["function"])
        fn["description"] = " ".join((fn.get("description") or "").split())
        fn["parameters"] = compact_schema(fn.get("parameters", {}))
        out.append({"type": "function", "function": fn})
    return out


def opening_messages(owner: str, question: Question) -> list[dict[str, Any]]:
    """The system prompt and the user's question; `owner` is the inbox owner's name."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"I am {owner}. {question.question}"},
    ]


def server_params(db: str | Path, inbox_id: str) -> StdioServerParameters:
    """Spawn parameters for the server over one inbox (run by path: it imports only mcp; the
    database path is made absolute, as the server need not start in this working directory)."""
    return StdioServerParameters(
        command=sys.executable, args=[str(SERVER), "--db", str(Path(db).resolve()), "--inbox", inbox_id]
    )


class InboxServers:
    """One `art_mcp.ServerPool` per inbox, started on first use, all stopped on exit.

    Example:
        async with InboxServers(db) as servers:
            async with servers.session("inbox-1000") as session:
                traj = await rollout(model, session, question, owner)
    """

    def __init__(
        self, db: str | Path, *, isolation: art_mcp.Isolation = "shared", max_processes: int = 4
    ) -> None:
        self.db = Path(db)
        if not self.db.exists():
            raise FileNotFoundError(
                f"no inbox database at {self.db}; write one with examples.art_e.inbox.write_db"
            )
        self.isolation = isolation
        self.max_processes = max_processes
        self.pools: dict[str, art_mcp.ServerPool] = {}

    async def __aenter__(self) -> InboxServers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def session(self, inbox_id: str) -> AsyncIterator[art_mcp.McpSession]:
        pool = self.pools.get(inbox_id)
        if pool is None:
            pool = art_mcp.ServerPool(
                server_params(self.db, inbox_id), isolation=self.isolation, max_processes=self.max_processes
            )
            self.pools[inbox_id] = await pool.__aenter__()
        async with pool.session() as session:
            yield session

    async def close(self) -> None:
        pools, self.pools = self.pools, {}
        for pool in pools.values():
            await pool.close()


async def rollout(
    model: art.Model,
    session: art_mcp.McpSession,
    question: Question,
    owner: str,
    *,
    max_turns: int = 8,
    temperature: float | None = None,
    max_tokens: int | None = None,
    extra_body: dict[str, Any] | None = None,
    wrong_reward: float = WRONG,
) -> art.Trajectory:
    """Run the agent on one question; the trajectory's reward is set from the known answer
    (`wrong_reward`: a wrong answer's base reward, `reward.score`'s `wrong`).

    `owner` is the inbox owner's name (the system prompt says whose inbox it is). Metrics carry the
    reward's parts (``correct``, ``format_error``, ``found_source``...); metadata the answer and sources.
    """
    tools = compact_tools(session.openai_tools())
    names = {t["function"]["name"] for t in tools}
    trajectory = art.Trajectory(
        messages=opening_messages(owner, question),
        tools=tools,
        metadata={"question_id": question.id, "inbox_id": question.inbox_id, "task": question.question},
    )
    params = art_mcp.request_params(model, temperature=temperature, max_tokens=max_tokens, extra_body=extra_body)
    out = Outcome()
    done = False
    async with model.openai_client() as client:
        with art.capture(trajectory):
            while out.turns < max_turns and not done:
                out.turns += 1
                response = await client.chat.completions.create(
                    model=model.served_name(), messages=trajectory.messages(), tools=tools, **params
                )
                message = response.choices[0].message
                if not message.tool_calls:
                    out.format_error = "a reply without a tool call"
                    break
                for call in message.tool_calls:
                    name, raw = call.function.name, call.function.arguments
                    problem = _format_problem(name, raw, names)
                    if problem is not None:
                        out.format_error = problem
                        done = True
                        break
                    result = await session.call(name, raw, tool_call_id=call.id)
                    args = result.arguments
                    if name == "search_emails" and not result.is_error:
                        out.found |= set(EMAIL_ID.findall(result.text))
                    elif name == "read_email" and not result.is_error:
                        out.read.add(str(args.get("message_id", "")).strip())
                    elif name == FINAL_ANSWER and not result.is_error:
                        out.answer, out.sources = str(args["answer"]), [str(s) for s in args["sources"]]
                        done = True
                        break
    reward, parts = score(out, question, max_turns=max_turns, wrong=wrong_reward)
    trajectory.reward = reward
    trajectory.metrics.update(parts)
    trajectory.metadata.update(answer=out.answer, sources=out.sources, format_error=out.format_error,
                               expected=question.answer)  # fmt: skip
    return trajectory.finish()


def _format_problem(name: str, raw: str | None, tools: set[str]) -> str | None:
    if name not in tools:
        return f"unknown tool {name!r}"
    try:
        args = json.loads(raw or "{}")
    except ValueError:
        return f"arguments of {name} are not JSON"
    if not isinstance(args, dict):
        return f"arguments of {name} are not a JSON object"
    if name == FINAL_ANSWER and not (
        isinstance(args.get("answer"), str)
        and isinstance(args.get("sources"), list)
        and all(isinstance(s, str) for s in args["sources"])
    ):
        return f"{FINAL_ANSWER} needs a string 'answer' and a list of id strings 'sources'"
    return None


def owner_of(inbox: Inbox) -> str:
    return inbox.owner.name
