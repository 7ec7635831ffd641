"""Subgraphs, parallel branches (Send), retries, and interrupt + resume."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, RetryPolicy, Send, interrupt

import art_core as art
import art_graph
from tests.graph.apps import tool_agent, tool_script
from tests.graph.conftest import trainable
from tests.support.scripted_openai import ScriptedOpenAI, fake_token_ids


def echo(body: dict) -> dict:
    return {"content": f"re: {body['messages'][-1]['content']}"}


def test_subgraph_calls_are_captured_with_their_node():
    with ScriptedOpenAI(lambda b: tool_script(b) if b.get("tools") else echo(b)) as server:
        llm = art_graph.chat_model(trainable(server.url))
        inner = tool_agent(llm)  # a compiled graph used as a node

        def summarize(state: MessagesState) -> dict:
            return {"messages": [llm.invoke([("user", "summarize: " + state["messages"][-1].content)])]}

        g = StateGraph(MessagesState)
        g.add_node("solver", inner)
        g.add_node("summarize", summarize)
        g.add_edge(START, "solver")
        g.add_edge("solver", "summarize")
        g.add_edge("summarize", END)
        graph = g.compile()
        with art_graph.capturing() as traj:
            graph.invoke({"messages": [("user", "2+3")]})
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "tool", "assistant"]
    # a node inside a subgraph is named by its path (issue 14: it was "agent", like any other agent's)
    assert {art.message_sample(m).node for m in traj.turns if m["role"] == "assistant"} == {"solver/agent"}
    (summary,) = traj.additional_histories
    assert summary.turns[-1]["content"] == "re: summarize: the sum is 5"
    assert art.message_sample(summary.turns[-1]).node == "summarize"
    assert traj.metadata["capture"]["nodes"] == {"solver/agent": 2, "summarize": 1}


class FanState(TypedDict):
    topics: list[str]
    jokes: Annotated[list[str], operator.add]


def test_send_parallel_branches_become_separate_histories():
    with ScriptedOpenAI(echo) as server:
        llm = art_graph.chat_model(trainable(server.url))

        def joke(state: dict) -> dict:
            return {"jokes": [llm.invoke([("user", f"joke about {state['topic']}")]).content]}

        g = StateGraph(FanState)
        g.add_node("joke", joke)
        g.add_conditional_edges(START, lambda s: [Send("joke", {"topic": t}) for t in s["topics"]], ["joke"])
        g.add_edge("joke", END)
        graph = g.compile()

        @art_graph.rollout
        async def run() -> float:
            state = await graph.ainvoke({"topics": ["cats", "dogs", "owls"], "jokes": []})
            return float(len(state["jokes"]))

        import asyncio

        traj = asyncio.run(run())
    assert traj.reward == 3.0
    histories = traj.histories()
    assert len(histories) == 3 and traj.metadata["capture"]["histories"] == 3
    contents = sorted(h.turns[-1]["content"] for h in histories)
    assert contents == ["re: joke about cats", "re: joke about dogs", "re: joke about owls"]
    for h in histories:
        assert len(h.turns) == 2
        sample = art.message_sample(h.turns[-1])
        assert sample.node == "joke" and sample.token_ids == fake_token_ids(h.turns[-1]["content"])


def test_retried_node_records_only_the_call_that_succeeded():
    script = [{"status": 500, "error": "overloaded"}, echo]
    with ScriptedOpenAI(script) as server:
        llm = art_graph.chat_model(trainable(server.url), max_retries=0)
        g = StateGraph(MessagesState)
        g.add_node(
            "agent",
            lambda s: {"messages": [llm.invoke(s["messages"])]},
            retry_policy=RetryPolicy(initial_interval=0.01, retry_on=Exception),
        )
        g.add_edge(START, "agent")
        g.add_edge("agent", END)
        graph = g.compile()
        with art_graph.capturing() as traj:
            graph.invoke({"messages": [("user", "hi")]})
    assert len(server.requests) == 2
    assert [m["content"] for m in traj.turns] == ["hi", "re: hi"]
    assert traj.metadata["capture"]["calls"] == 1 and traj.metadata["capture"]["failed_calls"] == 1


def test_model_with_retry_records_one_turn():
    script = [{"status": 500, "error": "overloaded"}, {"status": 500, "error": "again"}, echo]
    with ScriptedOpenAI(script) as server:
        llm = art_graph.chat_model(trainable(server.url), max_retries=0).with_retry(
            stop_after_attempt=3, wait_exponential_jitter=False
        )
        with art_graph.capturing() as traj:
            llm.invoke([("user", "hi")])
    assert [m["content"] for m in traj.turns] == ["hi", "re: hi"]
    assert traj.metadata["capture"]["failed_calls"] == 2


def test_interrupt_and_resume_continue_the_same_history():
    with ScriptedOpenAI(echo) as server:
        llm = art_graph.chat_model(trainable(server.url))

        def draft(state: MessagesState) -> dict:
            return {"messages": [llm.invoke(state["messages"])]}

        def review(state: MessagesState) -> dict:
            feedback = interrupt({"draft": state["messages"][-1].content})
            return {"messages": [("user", feedback)]}

        g = StateGraph(MessagesState)
        g.add_node("draft", draft)
        g.add_node("review", review)
        g.add_node("revise", draft)
        g.add_edge(START, "draft")
        g.add_edge("draft", "review")
        g.add_edge("review", "revise")
        g.add_edge("revise", END)
        graph = g.compile(checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t1"}}

        @art_graph.rollout
        def run() -> float:
            first = graph.invoke({"messages": [("user", "write")]}, config)
            assert "__interrupt__" in first
            final = graph.invoke(Command(resume="shorter please"), config)
            return float(final["messages"][-1].content == "re: shorter please")

        traj = run()
    assert traj.reward == 1.0
    assert [m["content"] for m in traj.turns] == [
        "write",
        "re: write",
        "shorter please",
        "re: shorter please",
    ]
    assert [art.message_sample(m).node for m in traj.turns if m["role"] == "assistant"] == ["draft", "revise"]
    assert traj.additional_histories == []
