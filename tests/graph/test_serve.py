"""A real graph against ART's own server, in-process (LocalBackend) and as a real `art serve` process
(RemoteBackend), with the tiny random model: captured token ids are the engine's, and they train."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from langgraph.graph import END, START, MessagesState, StateGraph

import art_core as art
import art_graph


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_captured_token_ids_are_the_engines_and_train(
    kind: str,
    tiny_model_path: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    from art_train import LocalBackend

    bodies: list[dict] = []

    async def keep_body(response: httpx.Response) -> None:  # what the engine sent, before LangChain parses it
        await response.aread()
        bodies.append(response.json())

    if kind == "local":
        backend = LocalBackend(path=tmp_path)
    else:
        backend = art.RemoteBackend(request.getfixturevalue("art_serve"))
    model = art.TrainableModel(name=f"graph-e2e-{kind}", project="graph", base_model=str(tiny_model_path))
    await model.register(backend)
    try:
        llm = art_graph.chat_model(
            model,
            max_tokens=6,
            temperature=1.0,
            http_async_client=httpx.AsyncClient(event_hooks={"response": [keep_body]}),
        )

        async def answer(state: MessagesState) -> dict:
            return {"messages": [await llm.ainvoke(state["messages"])]}

        async def check(state: MessagesState) -> dict:
            return {"messages": [await llm.ainvoke([*state["messages"], ("user", "Are you sure?")])]}

        g = StateGraph(MessagesState)
        g.add_node("answer", answer)
        g.add_node("check", check)
        g.add_edge(START, "answer")
        g.add_edge("answer", "check")
        g.add_edge("check", END)
        graph = g.compile()

        @art_graph.rollout(trainable_nodes={"answer", "check"})
        async def run(i: int) -> float:
            state = await graph.ainvoke({"messages": [("user", f"Say a number {i}.")]})
            return float(len(state["messages"][1].content) % 3)

        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(run(g * 2 + i) for i in range(2)) for g in range(2)], show_progress=False
        )
        trajectories = [t for g in groups for t in g.trajectories]
        assert len(trajectories) == 4 and not any(g.exceptions for g in groups)

        sent = [
            (b["choices"][0]["token_ids"], [c["logprob"] for c in b["choices"][0]["logprobs"]["content"]])
            for b in bodies
        ]
        captured = [
            (s.token_ids, s.logprobs)
            for t in trajectories
            for _, s in sorted(t.samples(), key=lambda x: x[0])
        ]
        assert len(captured) == len(sent) == 8
        for ids, logprobs in captured:
            assert (ids, logprobs) in sent  # the exact ids and logprobs the engine sampled
        for t in trajectories:
            assert [art.message_sample(m).node for m in t.turns if m["role"] == "assistant"] == [
                "answer",
                "check",
            ]
            assert t.metadata["capture"]["turns_without_token_ids"] == 0
        # the unpinned name answers from the newest checkpoint; the server's art_step reaches the sample
        assert {s.step for t in trajectories for _, s in t.samples()} == {0}

        result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-2), verbose=False)
        assert result.step == 1

        after = await run(9)
        assert [s.step for _, s in after.samples()] == [1, 1]
        streamed = art_graph.chat_model(model, max_tokens=4, streaming=True)
        with art_graph.capturing() as traj:
            reply = await streamed.ainvoke("Say a number.")
        assert [s.step for _, s in traj.samples()] == [1]
        assert reply.response_metadata["art_step"] == 1
    finally:
        await backend.close()
