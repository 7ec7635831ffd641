"""Faults outside the backend: MCP servers (real stdio processes) and a RULER judge (a real HTTP server).

Each fails the one call or group it belongs to with an error that names the problem and the fix;
the session or the caller goes on, and a judge failure never becomes a score.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import art_core as art
import art_mcp
import ruler
from art_core import capture
from ruler import JudgeError, RulerStats
from tests.support.scripted_openai import ScriptedOpenAI

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)

FAULTS = [sys.executable, str(Path(__file__).with_name("fault_server.py"))]


# -- MCP ---------------------------------------------------------------------------------------
async def test_mcp_server_that_exits_at_start_names_its_stderr() -> None:
    t0 = time.perf_counter()
    with pytest.raises(art_mcp.ServerStartError) as info:
        async with art_mcp.connect([*FAULTS, "exit"]):
            pass
    message = str(info.value)
    assert "before the MCP handshake finished" in message and "FAULT_API_KEY is not set" in message
    assert time.perf_counter() - t0 < 30  # fails at once, it does not wait out the start timeout


@pytest.fixture
async def faults():
    async with art_mcp.connect(FAULTS, timeout=20) as session:
        yield session


async def test_mcp_tool_that_raises_is_an_error_message(faults) -> None:
    with capture() as traj:
        result = await faults.call("boom", {"reason": "x"})
        after = await faults.call("echo", {"text": "still here"})
    # MCPServer hides the text of an exception that is not a ToolError; the tool is still named
    assert result.is_error and result.text.startswith("Error") and "boom" in result.text
    assert traj.turns[0]["content"] == result.text  # the model sees the error and can react
    assert after.text == "still here"


async def test_mcp_huge_output_is_cut_with_a_note(faults) -> None:
    with capture() as traj:
        result = await faults.call("huge", {"chars": 3_000_000})
        after = await faults.call("echo", {"text": "ok"})
    assert not result.is_error
    assert len(result.text) < 100_200 and "tool output cut: 3000000 characters" in result.text
    assert "max_output_chars" in result.text  # the fix
    assert traj.turns[0]["content"] == result.text and after.text == "ok"


@pytest.mark.parametrize("arguments, problem", [
    ('{"text": ', "not valid JSON"),
    ("[1, 2]", "must be a JSON object, got list"),
    ('"just text"', "must be a JSON object, got str"),
])
async def test_mcp_non_json_arguments_are_an_error_message(faults, arguments: str, problem: str) -> None:
    result = await faults.call("echo", arguments)
    assert result.is_error and problem in result.text
    assert (await faults.call("echo", {"text": "ok"})).text == "ok"


# -- the judge ---------------------------------------------------------------------------------
def _group() -> art.TrajectoryGroup:
    trajs = [art.Trajectory(messages=[{"role": "user", "content": "2+2?"}, art.assistant_turn(a)], reward=r)
             for a, r in (("4", 0.1), ("5", 0.2), ("22", 0.3))]
    return art.TrajectoryGroup(trajs)


def _args(server: ScriptedOpenAI, **kw) -> dict:
    return {"judge": "openai/judge", "litellm_params": {"api_base": server.url, "api_key": "x"},
            "retry_delay": 0.01, "timeout": 5.0, "max_attempts": 2, **kw}


def _answer(ids: list[str]) -> str:
    import json

    return json.dumps({"scores": [{"trajectory_id": i, "explanation": "ok", "score": 0.5} for i in ids]})


JUDGE_CASES = [
    ("500", {"status": 500, "error": "judge crashed"}, {}, ["judge crashed", "openai/judge"]),
    ("429", {"status": 429, "error": "rate limited"}, {}, ["rate limited", "openai/judge"]),
    ("timeout", {"delay": 2.0, "content": "late"}, {"timeout": 0.3}, ["Timeout", "openai/judge"]),
    ("wrong count", {"content": _answer(["1", "2"])}, {}, ["missing ['3']", "wrong answer twice"]),
    ("garbage", {"content": "the first one, obviously"}, {}, ["no JSON object", "wrong answer twice"]),
]


@pytest.mark.parametrize("reply, kw, expect", [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES])
async def test_judge_failure_raises_or_drops_and_never_scores(reply: dict, kw: dict, expect: list[str]) -> None:
    group = _group()
    with ScriptedOpenAI(reply) as server:
        with pytest.raises(JudgeError) as info:
            await ruler.score_group(group, **_args(server, **kw))
        for part in expect:
            assert part in str(info.value), str(info.value)
        stats = RulerStats()
        assert await ruler.score_group(group, **_args(server, **kw), swallow_exceptions=True, stats=stats) is None
    assert stats.groups_dropped == 1
    assert group.rewards() == [0.1, 0.2, 0.3]  # untouched: never a zero, never a partial score
    assert all("ruler_score" not in t.metrics for t in group.trajectories)
