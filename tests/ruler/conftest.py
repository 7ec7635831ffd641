"""A scripted judge on loopback: replies are built from the trajectories it is actually shown."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from art_core import Trajectory, TrajectoryGroup, assistant_turn

BLOCK = re.compile(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', re.S)


def shown(body: dict[str, Any]) -> dict[str, str]:
    """The trajectories in a judge request: id -> its rendered remainder."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return dict(BLOCK.findall(user))


def answer(scores: dict[str, float], note: str = "judged") -> str:
    return json.dumps({"scores": [{"trajectory_id": i, "explanation": f"{note} {i}", "score": s} for i, s in scores.items()]})


def judge_by(rule: Callable[[str], float]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A handler that scores each shown trajectory with `rule(its text)`."""
    return lambda body: {"content": answer({i: rule(text) for i, text in shown(body).items()})}


def solved(text: str) -> float:
    """1 for the right answer, partial credit for a search, 0 otherwise."""
    return 1.0 if "invoice-42" in text else 0.4 if "search" in text else 0.0


SYSTEM = {"role": "system", "content": "You are an email agent. Use the tools. " * 10}
TOOLS = [
    {"type": "function", "function": {"name": "search", "description": "Search the inbox", "parameters": {"type": "object"}}}
]


def rollout(reply: str, reward: float = 0.5, *, searched: bool = False) -> Trajectory:
    msgs = [SYSTEM, {"role": "user", "content": "Which invoice did ACME send?"}]
    if searched:
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "ACME"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1 result: the ACME invoice, number 42"},
        ]
    final = assistant_turn(reply, token_ids=[31337 + len(reply), 7], logprobs=[-0.123456, -0.5], step=2)
    return Trajectory(messages=[*msgs, final], tools=TOOLS, reward=reward)


@pytest.fixture
def group() -> TrajectoryGroup:
    """Right answer after a search, a search with a wrong answer, a guess, and the first one again."""
    return TrajectoryGroup(
        [
            rollout("It is invoice-42.", 0.1, searched=True),
            rollout("I could not tell.", 0.2, searched=True),
            rollout("Probably invoice-7.", 0.3),
            rollout("It is invoice-42.", 0.4, searched=True),
        ],
        metadata={"task": "acme-invoice"},
    )
