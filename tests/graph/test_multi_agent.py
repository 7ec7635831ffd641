"""Multi-agent graphs built with langgraph-supervisor and langgraph-swarm (issue 14).

Every agent's inner node is called "agent"; the capture names a call by its path in the graph
(``weather_agent/agent``), so `trainable_nodes` and per-node rewards can name one agent even when
all agents share one model.
"""

from __future__ import annotations

import asyncio
import warnings

from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from langgraph_supervisor import create_supervisor
from langgraph_swarm import create_handoff_tool, create_swarm

import art_core as art
import art_graph
from tests.graph.conftest import trainable
from tests.support.scripted_openai import ScriptedOpenAI

warnings.filterwarnings("ignore", message=".*create_react_agent.*")


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _tool_contents(body: dict) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]


def script(body: dict) -> dict:
    """Supervisor: weather agent, then math agent, then answer. Each agent: its tool, then answer."""
    names = {t["function"]["name"] for t in body.get("tools") or []}
    done = _tool_contents(body)
    if "transfer_to_weather_agent" in names:  # the supervisor
        back = sum("transferred back to supervisor" in c for c in done)
        if back == 0:
            return {"tool_calls": [{"name": "transfer_to_weather_agent", "arguments": {}}]}
        if back == 1:
            return {"tool_calls": [{"name": "transfer_to_math_agent", "arguments": {}}]}
        return {"content": "sunny, and 5"}
    if "get_weather" in names:
        if any(c.startswith("sunny in") for c in done):
            return {"content": "it is sunny"}
        return {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    if "add" in names:
        if "5" in done:
            return {"content": "it is 5"}
        return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
    raise AssertionError(f"unexpected request with tools {names}")


def supervisor_app(llm):
    weather = create_react_agent(llm, [get_weather], name="weather_agent")
    math = create_react_agent(llm, [add], name="math_agent")
    return create_supervisor([weather, math], model=llm).compile()


def _nodes(traj: art.Trajectory) -> list[str | None]:
    """The node of every assistant turn, sampled or not (None: context)."""
    out = []
    for h in [traj, *traj.additional_histories]:
        for m in h.turns:
            if m["role"] == "assistant":
                sample = art.message_sample(m)
                out.append(sample.node if sample else None)
    return out


def test_supervisor_agents_are_told_apart_and_one_is_trained():
    with ScriptedOpenAI(script) as server:
        app = supervisor_app(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout(trainable_nodes={"weather_agent"})
        def run(task: str) -> dict[str, float]:
            app.invoke({"messages": [("user", task)]})
            return {"weather_agent": 1.0, "math_agent": 0.0}

        traj = run("weather in Paris, then 2+3")
    nodes = traj.metadata["capture"]["nodes"]
    assert nodes == {"supervisor/agent": 3, "weather_agent/agent": 2, "math_agent/agent": 2}
    sampled = [n for n in _nodes(traj) if n is not None]
    assert sampled and set(sampled) == {"weather_agent/agent"}  # before: every call was "agent", none trained
    assert traj.metrics["node/weather_agent/agent/trainable_turns"] == 2
    assert traj.metrics["node/math_agent/agent/trainable_turns"] == 0


def test_per_agent_rewards_make_per_agent_groups():
    with ScriptedOpenAI(script) as server:
        app = supervisor_app(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout
        async def run(task: str, good: float) -> dict[str, float]:
            await app.ainvoke({"messages": [("user", task)]})
            return {"weather_agent": good, "math_agent": 1.0 - good}

        async def main() -> list[art.Trajectory]:
            return await asyncio.gather(*(run("weather, then 2+3", good=g) for g in (0.0, 0.5, 1.0)))

        trajectories = asyncio.run(main())
    groups = art_graph.node_groups([art.TrajectoryGroup(trajectories)])
    by_node = {g.metadata["node"]: g for g in groups}
    assert set(by_node) == {"math_agent", "weather_agent"}
    assert by_node["weather_agent"].rewards() == [0.0, 0.5, 1.0]
    assert by_node["math_agent"].rewards() == [1.0, 0.5, 0.0]
    for node, group in by_node.items():
        for t in group.trajectories:
            assert {n for n in _nodes(t) if n is not None} == {f"{node}/agent"}


def test_swarm_agents_are_told_apart():
    def swarm_script(body: dict) -> dict:
        names = {t["function"]["name"] for t in body.get("tools") or []}
        done = _tool_contents(body)
        if "transfer_to_math_agent" in names:  # the weather agent
            if not any(c.startswith("sunny in") for c in done):
                return {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}
            return {"tool_calls": [{"name": "transfer_to_math_agent", "arguments": {}}]}
        if "5" in done:
            return {"content": "sunny, and 5"}
        return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}

    with ScriptedOpenAI(swarm_script) as server:
        llm = art_graph.chat_model(trainable(server.url))
        weather = create_react_agent(
            llm, [get_weather, create_handoff_tool(agent_name="math_agent")], name="weather_agent"
        )
        math = create_react_agent(llm, [add], name="math_agent")
        app = create_swarm([weather, math], default_active_agent="weather_agent").compile()
        with art_graph.capturing(trainable_nodes={"math_agent/agent"}) as traj:
            app.invoke({"messages": [("user", "weather in Oslo, then 2+3")]})
    assert traj.metadata["capture"]["nodes"] == {"weather_agent/agent": 2, "math_agent/agent": 2}
    assert {n for n in _nodes(traj) if n is not None} == {"math_agent/agent"}


def test_node_names_match_agents_nodes_and_paths():
    from art_graph.handler import node_matches, node_path

    assert node_path({"langgraph_node": "agent", "langgraph_checkpoint_ns": "weather_agent:1f|agent:2a"}) == (
        "weather_agent/agent"
    )
    assert node_path({"langgraph_node": "writer", "langgraph_checkpoint_ns": "writer:9"}) == "writer"
    assert node_path({"langgraph_node": "writer"}) == "writer"
    assert node_path({}) is None
    assert node_matches("weather_agent", "weather_agent/agent")
    assert node_matches("agent", "weather_agent/agent")
    assert node_matches("weather_agent/agent", "weather_agent/agent")
    assert not node_matches("math_agent", "weather_agent/agent")
    assert not node_matches("weather", "weather_agent/agent")
