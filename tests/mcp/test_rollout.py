"""art_mcp.rollout: the generic agent loop against a real MCP server and a scripted model over HTTP."""

from __future__ import annotations

import pytest

import art_mcp
from art_core import Model, TrainableModel, message_sample
from tests.support.scripted_openai import ScriptedOpenAI


def _model(server: ScriptedOpenAI, trainable: bool = False) -> Model:
    if trainable:
        return TrainableModel(
            name="agent", base_model="tiny", inference_base_url=server.url, inference_api_key="x"
        )
    return Model(
        name="agent", inference_base_url=server.url, inference_api_key="x", inference_model_name="scripted"
    )


def _call(name: str, **args: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args}]}


async def test_tool_calls_then_complete_task():
    script = [
        _call("add_note", title="dentist", body="Friday 3pm", tags=["health"]),
        _call("search_notes", query="dentist"),
        _call("complete_task", answer="Saved: dentist on Friday 3pm"),
    ]
    with ScriptedOpenAI(script) as llm:
        async with art_mcp.connect(art_mcp.bundled_server("notes")) as session:
            traj = await art_mcp.rollout(_model(llm), session, "Remember my dentist appointment, Friday 3pm")
    roles = [m["role"] for m in traj.turns]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    assert traj.turns[3]["name"] == "add_note" and '"title": "dentist"' in traj.turns[3]["content"]
    assert "Friday 3pm" in traj.turns[5]["content"]
    assert traj.turns[7] == {
        "role": "tool",
        "tool_call_id": traj.turns[6]["tool_calls"][0]["id"],
        "content": "Task marked complete.",
        "name": "complete_task",
    }
    assert traj.metadata["final_answer"] == "Saved: dentist on Friday 3pm"
    assert traj.metadata["task"] == "Remember my dentist appointment, Friday 3pm"
    assert traj.metrics["turns"] == 3 and traj.metrics["finished"] is True and traj.metrics["mcp/calls"] == 2
    assert traj.end_time is not None
    # the model saw the server's tools plus complete_task, and each request carried the history so far
    offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert "add_note" in offered and offered[-1] == "complete_task"
    assert llm.requests[1]["messages"][-1]["role"] == "tool"
    assert len(llm.requests[2]["messages"]) == 6
    assert traj.tools == llm.requests[0]["tools"]


async def test_plain_answer_ends_and_errors_reach_the_model():
    script = [
        _call("calculate", expression="1/0"),
        _call("calculate", expression="(17 * 3) + 4"),
        {"content": "The answer is 55."},
    ]
    with ScriptedOpenAI(script) as llm:
        async with art_mcp.connect(art_mcp.bundled_server("calculator")) as session:
            traj = await art_mcp.rollout(_model(llm), session, {"task": "What is 17*3+4?", "id": "t1"})
    error_seen = llm.requests[1]["messages"][-1]
    assert error_seen["role"] == "tool" and "division by zero" in error_seen["content"]
    assert traj.turns[5]["content"] == "55.0"
    assert traj.metadata["final_answer"] == "The answer is 55." and traj.metadata["task_id"] == "t1"
    assert traj.metrics["mcp/errors"] == 1 and traj.metrics["turns"] == 3


async def test_max_turns_stops_the_loop():
    with ScriptedOpenAI(_call("calculate", expression="1+1")) as llm:
        async with art_mcp.connect(art_mcp.bundled_server("calculator")) as session:
            traj = await art_mcp.rollout(
                _model(llm), session, "Loop forever", max_turns=3, system_prompt="Be brief."
            )
            with pytest.raises(ValueError, match="max_turns must be at least 1"):
                await art_mcp.rollout(_model(llm), session, "x", max_turns=0)
            with pytest.raises(ValueError, match="the task has no text"):
                await art_mcp.rollout(_model(llm), session, {"prompt": "wrong key"})
    assert len(llm.requests) == 3
    assert traj.metrics["hit_max_turns"] is True and traj.metadata["final_answer"] is None
    assert traj.turns[0] == {"role": "system", "content": "Be brief."}


async def test_trainable_model_turns_keep_samples_and_pool_sessions():
    script = [_call("convert_units", value=5, from_unit="km", to_unit="m"), {"content": "5000 m"}]
    with ScriptedOpenAI(script) as llm:
        async with art_mcp.ServerPool(art_mcp.bundled_server("calculator"), isolation="shared") as pool:
            traj = await art_mcp.rollout(
                _model(llm, trainable=True), pool, "5 km in metres?", temperature=0.7
            )
    assert llm.requests[0]["logprobs"] is True and llm.requests[0]["temperature"] == 0.7
    samples = [message_sample(m) for m in traj.turns if m["role"] == "assistant"]
    assert all(s is not None and s.token_ids and len(s.logprobs) == len(s.token_ids) for s in samples)
    assert traj.turns[3]["content"] == "5000.0"
    assert "sample" not in traj.messages()[2]


async def test_a_server_with_its_own_complete_task_keeps_it(flaky):
    with ScriptedOpenAI(_call("complete_task", answer="42")) as llm:
        async with art_mcp.connect(flaky) as session:
            traj = await art_mcp.rollout(_model(llm), session, "Finish with 42")
    offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert offered.count("complete_task") == 1
    assert traj.turns[-1]["content"] == "recorded answer: 42" and traj.metadata["final_answer"] == "42"
    assert traj.metrics["finished"] is True and traj.metrics["mcp/calls"] == 1


def test_request_params_ask_logprobs_only_of_a_trainable_model() -> None:
    import art_core as art
    import art_mcp

    plain = art.Model(name="judge", base_model="x")
    trainable = art.TrainableModel(name="agent", project="p", base_model="x")
    assert art_mcp.request_params(plain) == {}
    assert art_mcp.request_params(trainable, temperature=0.0, max_tokens=8, extra_body={"seed": 1}) == {
        "temperature": 0.0, "max_tokens": 8, "logprobs": True, "extra_body": {"seed": 1}}
