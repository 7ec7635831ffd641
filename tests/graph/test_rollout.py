"""The @rollout decorator: what it returns, rewards (overall and per node), concurrency, surface."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

import art_core as art
import art_graph
from tests.graph.apps import async_tool_agent, tool_agent, two_node_app
from tests.graph.conftest import trainable
from tests.support.scripted_openai import ScriptedOpenAI


def test_public_surface_is_pinned():
    assert sorted(art_graph.__all__) == [
        "CaptureHandler",
        "capturing",
        "chat_model",
        "init_chat_model",
        "keep_nodes",
        "node_groups",
        "rollout",
        "set_node_rewards",
        "wrap_rollout",
    ]


def echo(body: dict) -> dict:
    return {"content": f"re: {body['messages'][-1]['content']}"}


def test_reward_fn_gets_arguments_by_name():
    seen = {}

    def score(result: str, question: str, trajectory: art.Trajectory) -> float:
        seen.update(result=result, question=question, turns=len(trajectory.turns))
        return 0.25

    with ScriptedOpenAI(echo) as server:
        llm = art_graph.chat_model(trainable(server.url))

        @art_graph.rollout(reward_fn=score)
        def run(question: str) -> str:
            return llm.invoke(question).content

        traj = run(question="hi")
    assert traj.reward == 0.25
    assert seen == {"result": "re: hi", "question": "hi", "turns": 2}


async def test_async_reward_fn_and_rollout_arguments():
    async def score(result: str) -> float:
        return float(len(result))

    with ScriptedOpenAI(echo) as server:
        llm = art_graph.chat_model(trainable(server.url))

        @art_graph.rollout(reward_fn=score)
        async def run(q: str) -> str:
            return (await llm.ainvoke(q)).content

        traj = await run("abc")
    assert traj.reward == float(len("re: abc"))


def test_returning_a_trajectory():
    with ScriptedOpenAI(echo) as server:
        llm = art_graph.chat_model(trainable(server.url))

        @art_graph.rollout
        def same() -> art.Trajectory:
            llm.invoke("x")
            traj = art.current_trajectory()
            traj.reward = 0.75
            return traj

        @art_graph.rollout
        def fresh() -> art.Trajectory:
            llm.invoke("y")
            return art.Trajectory(reward=0.5, metadata={"task": 3})

        t1, t2 = same(), fresh()
    assert t1.reward == 0.75 and t1.turns[-1]["content"] == "re: x" and t1.metadata["capture"]["calls"] == 1
    assert t2.reward == 0.5 and t2.turns[-1]["content"] == "re: y" and t2.metadata["task"] == 3
    assert t2.metadata["capture"]["calls"] == 1 and t2.end_time is not None


def test_bad_returns_and_misuse_name_the_fix():
    @art_graph.rollout
    def nothing() -> None:
        return None

    with pytest.raises(TypeError, match="return a reward"):
        nothing()

    with pytest.raises(TypeError, match="asks for \\['score'\\]"):
        art_graph.rollout(reward_fn=lambda score: 1.0)(lambda: "x")()

    with pytest.raises(TypeError, match="per-node rewards map node names to numbers"):
        art_graph.rollout(lambda: {"planner": "good"})()

    with pytest.raises(ValueError, match="rewards must be finite"):
        art_graph.rollout(lambda: float("nan"))()

    with pytest.raises(TypeError, match="wrap the one name: \\{'writer'\\}"):
        art_graph.rollout(trainable_nodes="writer")

    with pytest.raises(TypeError, match="chat_model\\(\\) takes an art_core Model"):
        art_graph.chat_model("gpt-4")

    with pytest.raises(RuntimeError, match="register"):
        art_graph.chat_model(art.TrainableModel(name="m", base_model="x"))


def test_errors_in_the_graph_propagate():
    @art_graph.rollout
    def boom() -> float:
        raise KeyError("missing state key")

    with pytest.raises(KeyError, match="missing state key"):
        boom()
    assert art.current_trajectory() is None


def test_per_node_rewards_and_node_groups():
    with ScriptedOpenAI(
        lambda b: {"content": f"{b['messages'][0]['content']} #{len(b['messages'])}"}
    ) as server:
        llm = art_graph.chat_model(trainable(server.url))
        graph = two_node_app(llm, llm)

        @art_graph.rollout
        def run(plan_score: float, write_score: float) -> dict[str, float]:
            graph.invoke({"messages": [("user", "task")]})
            return {"planner": plan_score, "writer": write_score}

        group = art.TrajectoryGroup([run(1.0, 0.0), run(0.0, 0.5)])
    t = group.trajectories[0]
    assert t.reward == 0.5 and t.metadata["node_rewards"] == {"planner": 1.0, "writer": 0.0}
    assert t.metrics["node/planner/reward"] == 1.0 and t.metrics["node/writer/calls"] == 1

    by_node = {g.metadata["node"]: g for g in art_graph.node_groups([group])}
    assert set(by_node) == {"planner", "writer"}
    assert by_node["planner"].rewards() == [1.0, 0.0] and by_node["writer"].rewards() == [0.0, 0.5]
    for node, g in by_node.items():
        for traj in g.trajectories:
            nodes = {s.node for h in traj.histories() for _, s in h.samples()}
            assert nodes == {node}  # the other node's turn is context here
    assert [s.node for h in group.trajectories[0].histories() for _, s in h.samples()] == [
        "planner",
        "writer",
    ]


async def test_100_concurrent_async_rollouts_never_mix_turns():
    def script(body: dict) -> dict:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return {"content": f"{body['messages'][0]['content']} = {last['content']}", "delay": 0.01}
        n = int(last["content"].split()[-1])
        return {"tool_calls": [{"name": "add", "arguments": {"a": n, "b": 1000}}], "delay": 0.01}

    with ScriptedOpenAI(script) as server:
        graph = async_tool_agent(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout
        async def run(n: int) -> float:
            await graph.ainvoke({"messages": [("user", f"task {n}")]})
            return float(n)

        trajectories = await asyncio.gather(*(run(n) for n in range(100)))
    assert len(server.requests) == 200
    for n, traj in enumerate(trajectories):
        assert traj.reward == n
        assert [m["role"] for m in traj.turns] == ["user", "assistant", "tool", "assistant"]
        assert traj.turns[0]["content"] == f"task {n}"
        assert traj.turns[2]["content"] == str(n + 1000)
        assert traj.turns[3]["content"] == f"task {n} = {n + 1000}"
        assert traj.additional_histories == [] and traj.metadata["capture"]["calls"] == 2


def test_concurrent_sync_rollouts_in_threads_never_mix_turns():
    with ScriptedOpenAI(lambda b: {"content": f"re: {b['messages'][-1]['content']}"}) as server:
        graph = tool_agent(art_graph.chat_model(trainable(server.url)))

        @art_graph.rollout
        def run(n: int) -> float:
            graph.invoke({"messages": [("user", f"task {n}")]})
            return float(n)

        with ThreadPoolExecutor(8) as pool:
            trajectories = list(pool.map(run, range(24)))
    for n, traj in enumerate(trajectories):
        assert [m["content"] for m in traj.turns] == [f"task {n}", f"re: task {n}"]


def test_import_pulls_in_no_other_plugin_or_torch():
    import subprocess
    import sys

    code = (
        "import sys, art_graph; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'art_train', 'ruler', 'art_mcp', 'torch', 'litellm', 'mcp'}); "
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"
