"""Streaming (stream, astream, astream_events) and structured output are captured like plain calls."""

from __future__ import annotations

from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import BaseModel

import art_core as art
import art_graph
from tests.graph.apps import async_tool_agent, tool_agent, tool_script
from tests.graph.conftest import trainable
from tests.support.scripted_openai import ScriptedOpenAI, fake_token_ids


def check_streamed(traj: art.Trajectory) -> None:
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "tool", "assistant"]
    answer = traj.turns[-1]
    assert answer["content"] == "the sum is 5"
    sample = art.message_sample(answer)
    assert sample is not None and sample.token_ids == fake_token_ids("the sum is 5")
    assert sample.logprobs is not None and len(sample.logprobs) == 4 and sample.node == "agent"
    assert traj.turns[1]["tool_calls"][0]["function"]["name"] == "add"
    assert traj.additional_histories == []


def test_graph_stream_messages_mode_with_streaming_model():
    with ScriptedOpenAI(tool_script) as server:
        graph = tool_agent(art_graph.chat_model(trainable(server.url), streaming=True))

        @art_graph.rollout
        def run() -> float:
            pieces = [
                chunk.content
                for chunk, _ in graph.stream({"messages": [("user", "2+3")]}, stream_mode="messages")
            ]
            return float("the sum is 5" in "".join(str(p) for p in pieces))

        traj = run()
    assert all(r.get("stream") for r in server.requests)
    assert traj.reward == 1.0
    check_streamed(traj)


async def test_graph_astream_updates():
    with ScriptedOpenAI(tool_script) as server:
        graph = async_tool_agent(art_graph.chat_model(trainable(server.url), streaming=True))

        @art_graph.rollout
        async def run() -> float:
            updates = [u async for u in graph.astream({"messages": [("user", "2+3")]}, stream_mode="updates")]
            return float(len(updates))

        traj = await run()
    assert traj.reward == 3.0  # agent, tools, agent
    check_streamed(traj)


async def test_graph_astream_events():
    with ScriptedOpenAI(tool_script) as server:
        graph = async_tool_agent(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout
        async def run() -> float:
            tokens = []
            async for event in graph.astream_events({"messages": [("user", "2+3")]}, version="v2"):
                if event["event"] == "on_chat_model_stream":
                    tokens.append(event["data"]["chunk"].content)
            return float("".join(str(t) for t in tokens) == "the sum is 5")

        traj = await run()
    assert traj.reward == 1.0
    check_streamed(traj)


class Verdict(BaseModel):
    answer: int
    confident: bool


def _structured_graph(llm, **kwargs):
    judge = llm.with_structured_output(Verdict, **kwargs)

    def decide(state: MessagesState) -> dict:
        verdict = judge.invoke(state["messages"])
        return {"messages": [("assistant", f"answer={verdict.answer}")]}

    g = StateGraph(MessagesState)
    g.add_node("decide", decide)
    g.add_edge(START, "decide")
    g.add_edge("decide", END)
    return g.compile()


def test_with_structured_output_json_schema():
    reply = '{"answer": 5, "confident": true}'
    with ScriptedOpenAI({"content": reply}) as server:
        graph = _structured_graph(art_graph.chat_model(trainable(server.url)))
        with art_graph.capturing() as traj:
            state = graph.invoke({"messages": [("user", "2+3?")]})
    assert state["messages"][-1].content == "answer=5"
    assert server.requests[0]["response_format"]["type"] == "json_schema"
    turn = traj.turns[-1]
    assert turn["role"] == "assistant" and turn["content"] == reply
    sample = art.message_sample(turn)
    assert sample.token_ids == fake_token_ids(reply) and sample.node == "decide"


def test_with_structured_output_function_calling():
    call = {"name": "Verdict", "arguments": {"answer": 5, "confident": False}}
    with ScriptedOpenAI({"tool_calls": [call]}) as server:
        graph = _structured_graph(art_graph.chat_model(trainable(server.url)), method="function_calling")
        with art_graph.capturing() as traj:
            state = graph.invoke({"messages": [("user", "2+3?")]})
    assert state["messages"][-1].content == "answer=5"
    turn = traj.turns[-1]
    assert turn["tool_calls"][0]["function"]["name"] == "Verdict"
    assert [t["function"]["name"] for t in traj.tools] == ["Verdict"]
    assert art.message_sample(turn).node == "decide"
