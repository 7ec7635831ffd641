"""A scripted oracle judge for RULER on ART-E: it scores each trajectory it is shown with ART-E's reward.

It checks RULER's mechanism, not a model. It is served over the real chat-completions protocol on
loopback and reached through litellm as a paid judge is (``openai/oracle`` with an ``api_base``). It
sees only what RULER sends: it reads the user's question from the judge prompt (and looks up its
known answer in the dataset, as ART-E's reward does), turns each ``<trajectory id="...">`` transcript
back into what the agent did (searches, reads, final answer, format errors), scores that with
`reward.score`, and answers in RULER's JSON form. Nothing tells it the rewards, so Kendall's tau near
1 against them shows the prompt's rendering, its ids, the answer's parsing and the ordering are right.

    with oracle_server(inboxes) as server:
        await ruler.score_group(group, judge="openai/oracle", litellm_params={"api_base": server.url, "api_key": "none"})
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .inbox import Inbox, Question
from .reward import CORRECT, FORMAT_ERROR, PARTIAL, Outcome, grade, score
from .rollout import EMAIL_ID, FINAL_ANSWER, _format_problem, opening_messages
from .teacher import MAX_TURNS

__all__ = ["Shown", "oracle_handler", "oracle_scores", "oracle_server", "outcome", "parse_transcript"]

BLOCK = re.compile(r'<trajectory id="([^"]+)">\n(.*?)\n</trajectory>', re.S)
CONTEXT = re.compile(r"<context>\n(.*?)\n</context>", re.S)
TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.S)
HEADER = re.compile(r"^\[(system|user|assistant|tool result)(?: (\S+))?\]$")
CALL = re.compile(r"^\[tool call (\S*)\] (\w+)\((.*)\)$")
BEST = CORRECT + 2 * PARTIAL  # full source overlap, no turns used


@dataclass
class Shown:
    """One message as RULER's transcript shows it."""

    role: str
    ref: str = ""  # a tool result's call id
    text: list[str] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments)


def parse_transcript(text: str) -> list[Shown]:
    """Messages back from ``ruler.prompt.render_messages``' plain transcript."""
    out: list[Shown] = []
    for line in text.split("\n"):
        head, call = HEADER.match(line), CALL.match(line)
        if head:
            out.append(Shown(role=head[1], ref=head[2] or ""))
        elif call and out and out[-1].role == "assistant":
            out[-1].calls.append((call[1], call[2], call[3]))
        elif out:
            out[-1].text.append(line)
    return out


def outcome(messages: list[Shown], tools: set[str]) -> Outcome:
    """What the agent did, replayed as the rollout loop (`rollout.rollout`) records it."""
    results = {m.ref: "\n".join(m.text) for m in messages if m.role == "tool result"}
    out = Outcome()
    for m in messages:
        if m.role != "assistant":
            continue
        out.turns += 1
        if not m.calls:
            out.format_error = "a reply without a tool call"
            return out
        for call_id, name, raw in m.calls:
            if problem := _format_problem(name, raw, tools):
                out.format_error = problem
                return out
            args, result = json.loads(raw), results.get(call_id, "")
            if name == "search_emails":
                out.found |= set(EMAIL_ID.findall(result))
            elif name == "read_email" and result.startswith("id: "):  # read_email's reply, not an error
                out.read.add(str(args.get("message_id", "")).strip())
            elif name == FINAL_ANSWER and result.startswith("Answer recorded"):
                out.answer, out.sources = str(args["answer"]), [str(s) for s in args["sources"]]
                return out
    return out


def _tool_names(text: str) -> set[str]:
    lines = [line for block in TOOLS.findall(text) for line in block.split("\n")]
    return {json.loads(line)["function"]["name"] for line in lines}


def oracle_scores(prompt: str, questions: dict[str, Question]) -> list[dict[str, Any]]:
    """RULER's answer entries for a judge prompt, in prompt order; `questions` maps the user's
    message (``rollout.opening_messages``) to its question. A KeyError names an unknown question."""
    context = CONTEXT.search(prompt)
    shared = context[1] if context else ""
    entries = []
    for traj_id, body in BLOCK.findall(prompt):
        messages = parse_transcript(shared) + parse_transcript(body)
        asked = next(("\n".join(m.text) for m in messages if m.role == "user"), "")
        if asked not in questions:
            raise KeyError(f"trajectory {traj_id} asks a question not in the dataset: {asked[:120]!r}")
        q = questions[asked]
        did = outcome(messages, _tool_names(shared + "\n" + body))
        reward, _ = score(did, q, max_turns=MAX_TURNS)
        why = did.format_error or f"{grade(did.answer, q)} answer"
        entries.append({
            "trajectory_id": traj_id,
            "explanation": f"{why}; {did.turns} turns, read {len(did.read & set(q.sources))} sources; reward {reward:+.2f}",
            "score": round(min(1.0, max(0.0, (reward - FORMAT_ERROR) / (BEST - FORMAT_ERROR))), 4),
        })  # fmt: skip
    return entries


def oracle_handler(
    inboxes: Iterable[Inbox],
    change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A `ScriptedOpenAI` handler answering RULER's judge requests; `change` alters the entries
    before they are sent (a test's deliberately broken judge)."""
    questions = {opening_messages(i.owner.name, q)[1]["content"]: q for i in inboxes for q in i.questions}

    def handle(body: dict[str, Any]) -> dict[str, Any]:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        try:
            entries = oracle_scores(prompt, questions)
        except KeyError as exc:
            return {"status": 400, "error": str(exc)}
        # the same JSON answers both forms: with response_format (JudgeAnswer or the group's schema:
        # these ids, in prompt order) and without (RULER then finds the object in the text)
        return {"content": json.dumps({"scores": change(entries) if change else entries})}

    return handle


def oracle_server(inboxes: Iterable[Inbox], **kwargs: Any) -> Any:
    """The oracle on loopback (a context manager with ``.url`` and ``.requests``): the repository's
    scripted OpenAI server (tests/support), so the protocol is the one the tests check."""
    from tests.support.scripted_openai import ScriptedOpenAI

    return ScriptedOpenAI(oracle_handler(inboxes, **kwargs), model="oracle")
