"""A scripted teacher for SFT distillation: it uses the email tools the way a careful agent would.

For each question it runs the searches of the question's plan, reads each source email, and hands
in the known answer with those sources, all through the real MCP server, so every tool result in
its trajectories is what the server really returns. Each trajectory is scored with the same reward
as the agent's; one that is not correct is a bug and raises. The records are written as JSONL
(`messages`, `tools`) for `art_core.load_sft_jsonl`.

    python -m examples.art_e.teacher --out teacher.jsonl          # the 8 train inboxes

Any OpenAI-compatible model can teach instead: run `rollout` with an `art_core.Model` pointed at
it and keep the trajectories whose ``correct`` metric is 1 (see `train.py --teacher-model`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import art_core as art
import art_mcp

from .inbox import Inbox, Question, dataset, day_phrase, money, write_db
from .reward import Outcome, score
from .rollout import EMAIL_ID, FINAL_ANSWER, InboxServers, compact_tools, opening_messages

__all__ = ["TeacherError", "teach", "teach_inboxes"]

logger = logging.getLogger(__name__)
MAX_TURNS = 8


class TeacherError(RuntimeError):
    """The scripted teacher could not reach the known answer: the generator or the server is wrong."""


def _call(n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def spoken(question: Question) -> str:
    """The answer as the emails write it (a date as 'Monday, March 17', an amount as '$1,046.88')."""
    if question.kind == "date":
        return day_phrase(dt.date.fromisoformat(question.answer))
    if question.kind == "amount":
        return money(float(question.answer))
    return question.answer


async def teach(session: art_mcp.McpSession, question: Question, owner: str) -> dict[str, Any]:
    """One teacher record for `question` (the final turn is the `return_final_answer` call)."""
    messages = opening_messages(owner, question)
    out = Outcome()

    async def use(name: str, arguments: dict[str, Any]) -> str:
        turn = _call(len(messages), name, arguments)
        messages.append(turn)
        out.turns += 1
        result = await session.call(name, arguments, tool_call_id=turn["tool_calls"][0]["id"])
        if result.is_error:
            raise TeacherError(f"{question.id}: {name}({arguments}) failed: {result.text}")
        messages.append(result.message())
        return result.text

    for keywords in question.plan:
        out.found |= set(EMAIL_ID.findall(await use("search_emails", {"keywords": list(keywords)})))
    if missing := set(question.sources) - out.found:
        raise TeacherError(f"{question.id}: the plan's searches never list sources {sorted(missing)}")
    for source in question.sources:
        await use("read_email", {"message_id": source})
        out.read.add(source)
    answer = spoken(question)
    final = _call(len(messages), FINAL_ANSWER, {"answer": answer, "sources": list(question.sources)})
    messages.append(final)
    out.turns += 1
    out.answer, out.sources = answer, list(question.sources)
    reward, parts = score(out, question, max_turns=MAX_TURNS)
    if parts["correct"] != 1.0:
        raise TeacherError(f"{question.id}: the teacher's answer {answer!r} does not grade as correct")
    return {
        "messages": messages,
        "tools": compact_tools(session.openai_tools()),  # what the agent is shown (rollout.py)
        "metadata": {"question_id": question.id, "inbox_id": question.inbox_id, "reward": reward},
    }


async def teach_inboxes(db: str | Path, inboxes: list[Inbox]) -> list[dict[str, Any]]:
    """Teacher records for every question of `inboxes` (all held in the database at `db`)."""
    records = []
    async with InboxServers(db) as servers:
        for inbox in inboxes:
            async with servers.session(inbox.id) as session:
                for question in inbox.questions:
                    records.append(await teach(session, question, inbox.owner.name))
    return records


async def _main(args: argparse.Namespace) -> None:
    train, _ = dataset(args.train_inboxes, 0)
    with tempfile.TemporaryDirectory() as tmp:
        db = write_db(train, Path(tmp) / "inboxes.sqlite")
        records = await teach_inboxes(db, train)
    n = art.write_sft_jsonl(args.out, records)
    logger.info("wrote %d teacher trajectories to %s", n, args.out)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser(description="Write scripted-teacher SFT data for ART-E.")
    p.add_argument("--out", required=True, help="the JSONL file to write")
    p.add_argument("--train-inboxes", type=int, default=8)
    asyncio.run(_main(p.parse_args()))
