"""Verified AutoRL against real MCP servers over stdio: gold runs, answer and state checks, refusal of
a non-deterministic server, and SFT traces from the gold runs. The agent is a scripted model over HTTP."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import art_mcp
from art_core import Model
from art_mcp.verified import answer_score, score
from tests.support.scripted_openai import ScriptedOpenAI

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)

RANDOM = [sys.executable, str(Path(__file__).with_name("random_server.py"))]


def _model(llm: ScriptedOpenAI) -> Model:
    return Model(
        name="agent", inference_base_url=llm.url, inference_api_key="x", inference_model_name="scripted"
    )


def _call(name: str, **args: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args}]}


@pytest.fixture(scope="module")
def calculator_tasks() -> list[art_mcp.VerifiedTask]:
    return asyncio.run(art_mcp.generate_verified_tasks(art_mcp.bundled_server("calculator"), 6, seed=0))


@pytest.fixture(scope="module")
def notes_tasks() -> list[art_mcp.VerifiedTask]:
    return asyncio.run(
        art_mcp.generate_verified_tasks(art_mcp.bundled_server("notes"), 8, seed=3, walk_length=4)
    )


def test_answer_score_by_hand():
    assert answer_score({"result": 70.0}, "The result is 70.") == 1.0
    assert answer_score({"result": 70.0}, "71") == 0.0
    assert answer_score({"result": 4.499999999999999}, "about 4.5") == 1.0  # rounded as written
    assert answer_score({"result": 4.499999999999999}, "4.4") == 0.0
    assert answer_score({"result": 0.0049}, "0") == 0.0  # "0" is within its rounding but 100% off
    assert answer_score({"result": 43525.80927}, "43,525.81 yards") == 1.0
    # a note: id, title, body and one tag; the answer names 3 of the 4 values
    gold = {"id": 2, "title": "Dentist", "body": "friday 3pm", "tags": ["health"]}
    assert answer_score(gold, "Note 2, dentist: Friday 3pm") == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="holds no value"):
        answer_score({"result": []}, "nothing")


def test_calculator_tasks_come_from_the_schemas_with_gold_results(calculator_tasks):
    assert len(calculator_tasks) == 6 and len({t.id for t in calculator_tasks}) == 6
    for t in calculator_tasks:
        assert t.kind == "answer" and t.setup == [] and t.state == {}  # a server with no read tools: no state
        assert t.call.name in {"calculate", "convert_units"} and t.tools == [t.call.name]
        assert isinstance(t.gold["result"], float)
        for value in t.call.arguments.values():  # the task says every value the call needs
            assert str(value) in t.task
    # the same seed gives the same tasks
    again = asyncio.run(art_mcp.generate_verified_tasks(art_mcp.bundled_server("calculator"), 6, seed=0))
    assert [t.model_dump() for t in again] == [t.model_dump() for t in calculator_tasks]


async def test_a_right_answer_scores_1_and_a_wrong_one_0(calculator_tasks):
    task = calculator_tasks[0]
    right = f"It is {task.gold['result']:.6f}"
    wrong = f"It is {task.gold['result'] + 7:.6f}"
    async with art_mcp.ServerPool(art_mcp.bundled_server("calculator"), isolation="shared") as pool:
        script = [_call(task.call.name, **task.call.arguments), _call("complete_task", answer=right)]
        with ScriptedOpenAI(script) as llm:
            good = await art_mcp.verified_rollout(_model(llm), pool, task)
        with ScriptedOpenAI(_call("complete_task", answer=wrong)) as llm:
            bad = await art_mcp.verified_rollout(_model(llm), pool, task)
    assert good.reward == 1.0 and good.metrics["verified"] == 1.0 and good.metadata["kind"] == "answer"
    assert good.metadata["mcp_calls"][0]["name"] == task.call.name
    assert bad.reward == 0.0


def test_notes_tasks_check_state_and_replay_setup(notes_tasks):
    kinds = {t.kind for t in notes_tasks}
    assert kinds == {"answer", "state"}
    assert len({t.id for t in notes_tasks}) == len(notes_tasks)  # the same words after another setup differ
    stateful = [t for t in notes_tasks if t.kind == "state"]
    for t in stateful:
        assert "list_notes" in t.state  # read back with the server's own read tools
        assert t.call.name in {"add_note", "update_note", "delete_note"}
    # a task after a change replays it first: its setup holds only state-changing calls
    assert any(t.setup for t in notes_tasks)
    assert all(c.name in {"add_note", "update_note", "delete_note"} for t in notes_tasks for c in t.setup)


async def test_state_after_the_agent_run_is_checked_against_the_gold_run(notes_tasks):
    task = next(t for t in notes_tasks if t.kind == "state" and t.call.name == "add_note")
    other = {**task.call.arguments, "title": task.call.arguments["title"] + " two"}
    async with art_mcp.ServerPool(art_mcp.bundled_server("notes"), isolation="per_rollout") as pool:
        with ScriptedOpenAI(
            [_call("add_note", **task.call.arguments), _call("complete_task", answer="ok")]
        ) as llm:
            good = await art_mcp.verified_rollout(_model(llm), pool, task)
        with ScriptedOpenAI([_call("add_note", **other), _call("complete_task", answer="ok")]) as llm:
            wrong_title = await art_mcp.verified_rollout(_model(llm), pool, task)
        with ScriptedOpenAI(_call("complete_task", answer="done")) as llm:
            did_nothing = await art_mcp.verified_rollout(_model(llm), pool, task)
    assert good.reward == 1.0 and good.metadata["state"] == task.state
    assert wrong_title.reward == 0.0 and did_nothing.reward == 0.0
    assert score(task, "anything", task.state) == 1.0


async def test_read_state_sees_what_a_run_left(notes_tasks):
    async with art_mcp.connect(art_mcp.bundled_server("notes")) as session:
        plan = art_mcp.StatePlan.of(session.tools)
        assert plan.listers == ("list_notes",) and ("get_note", "note_id") in plan.getters
        assert await art_mcp.read_state(session, plan) == {"list_notes": {"result": []}}
        await session.call("add_note", {"title": "t", "body": "b"})
        state = await art_mcp.read_state(session, plan)
    assert state["get_note(note_id=1)"] == {"id": 1, "title": "t", "body": "b", "tags": []}


@pytest.mark.parametrize("only", ["", "state"])
async def test_a_non_deterministic_server_is_refused(only):
    with pytest.raises(art_mcp.NonDeterministicServer) as info:
        await art_mcp.generate_verified_tasks([*RANDOM, *([only] if only else [])], 4, seed=0, walk_length=4)
    message = str(info.value)
    assert "is not deterministic" in message and "one run" in message and "--judge" in message
    if only == "state":  # add_item's random ids show in list_items: the states of the two runs differ
        assert "list_items read" in message


async def test_only_the_tools_named_are_sampled():
    server = art_mcp.bundled_server("calculator")
    tasks = await art_mcp.generate_verified_tasks(server, 4, seed=1, walk_length=4, tools=["convert_units"])
    assert len(tasks) == 4 and {t.call.name for t in tasks} == {"convert_units"}
    with pytest.raises(ValueError, match="no tool named 'clock'; its tools: calculate, convert_units"):
        await art_mcp.generate_verified_tasks(server, 2, seed=1, tools=["calculate", "clock"])


def test_gold_runs_make_sft_traces(calculator_tasks):
    task = calculator_tasks[0]
    traj = art_mcp.gold_trajectory(task, [{"type": "function", "function": {"name": task.call.name}}])
    roles = [m["role"] for m in traj.messages()]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert traj.messages()[1]["content"] == task.task
    assert traj.messages()[4]["tool_calls"][0]["function"]["name"] == "complete_task"
    # the SFT answer is itself a right answer
    import json

    answer = json.loads(traj.messages()[4]["tool_calls"][0]["function"]["arguments"])["answer"]
    assert answer_score(task.gold, answer) == 1.0
    assert [t["function"]["name"] for t in traj.tools] == [task.call.name, "complete_task"]


def test_tasks_round_trip_through_jsonl(tmp_path, notes_tasks):
    path = art_mcp.save_tasks(tmp_path / "tasks.jsonl", notes_tasks)
    assert art_mcp.load_verified_tasks(path) == notes_tasks
    plain = art_mcp.save_tasks(
        tmp_path / "plain.jsonl", [art_mcp.Task(task="Save a note about milk", difficulty=1)]
    )
    with pytest.raises(ValueError, match="plain.jsonl:1 is not a verified task"):
        art_mcp.load_verified_tasks(plain)


async def test_a_generator_rewords_tasks_but_never_drops_a_value(calculator_tasks):
    a, b = calculator_tasks[:2]
    keeps = next(iter(a.call.arguments.values()))

    def reply(body: dict) -> dict:
        asked = body["messages"][0]["content"]
        if a.task in asked:
            return {"content": f"Hey, could you work out {keeps} for me?"}
        return {"content": "Could you work that out for me?"}  # drops the values: the template stays

    with ScriptedOpenAI(reply) as llm:
        out = await art_mcp.reword_tasks(
            [a, b], "openai/writer", litellm_params={"api_base": llm.url, "api_key": "x"}
        )
    assert len(llm.requests) == 2
    if len(a.call.arguments) == 1:
        assert out[0].task == f"Hey, could you work out {keeps} for me?" and out[0].gold == a.gold
    else:  # convert_units: the reply keeps only one of three values
        assert out[0].task == a.task
    assert out[1].task == b.task
