"""An unchanged LangGraph app, its chat model built the app's own way (`init_chat_model("openai:...",
base_url=...)`, its own `ChatOpenAI`), served by ART with the tiny random model: its sampled turns keep
the engine's exact token ids, and they train. A rollout that ends with nothing trainable says why."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from langchain.chat_models import init_chat_model
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

import art_core as art
import art_graph


def build_app(llm) -> object:  # noqa: ANN001 - the app's own code: it knows nothing of ART
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
    return g.compile()


@pytest.mark.slow
async def test_an_unchanged_app_keeps_sampled_ids_and_trains(tiny_model_path: Path, tmp_path: Path) -> None:
    from art_train import LocalBackend

    bodies: list[dict] = []

    async def keep_body(response: httpx.Response) -> None:  # what the engine sent, before LangChain parses it
        await response.aread()
        if response.headers.get("content-type", "").startswith("application/json"):
            bodies.append(response.json())

    backend = LocalBackend(path=tmp_path)
    model = art.TrainableModel(name="unchanged", project="graph", base_model=str(tiny_model_path))
    await model.register(backend)
    try:
        spy = httpx.AsyncClient(event_hooks={"response": [keep_body]})
        models = {
            "init_chat_model": init_chat_model(f"openai:{model.name}", base_url=model.inference_base_url,
                                               api_key="k", max_tokens=6, temperature=1.0, http_async_client=spy),
            "ChatOpenAI": ChatOpenAI(model=model.name, base_url=model.inference_base_url, api_key="k",
                                     max_tokens=6, temperature=1.0, http_async_client=spy),
            "streaming": ChatOpenAI(model=model.name, base_url=model.inference_base_url, api_key="k",
                                    max_tokens=6, temperature=1.0, streaming=True),
        }
        step = 0
        for kind, llm in models.items():
            app = build_app(llm)

            @art_graph.rollout
            async def run(i: int) -> float:
                state = await app.ainvoke({"messages": [("user", f"Say a number {i}.")]})  # noqa: B023
                return float(i % 2) + len(state["messages"][1].content) / 100  # each group: one 0.x, one 1.x

            groups = await art.gather_trajectory_groups(
                [art.TrajectoryGroup(run(g * 2 + i) for i in range(2)) for g in range(2)], show_progress=False)
            trajectories = [t for g in groups for t in g.trajectories]
            for t in trajectories:
                report = t.metadata["capture"]
                assert report["trainable_turns"] == 2 and report["turns_without_token_ids"] == 0, (kind, report)
                assert [art.message_sample(m).node for m in t.turns if m["role"] == "assistant"] == [
                    "answer", "check"]
                assert {s.step for _, s in t.samples()} == {step}  # the checkpoint that served it
            if kind != "streaming":
                sent = [(b["choices"][0]["token_ids"], [c["logprob"] for c in b["choices"][0]["logprobs"]["content"]])
                        for b in bodies]
                captured = [(s.token_ids, s.logprobs) for t in trajectories for _, s in t.samples()]
                assert len(captured) == 8 and all(c in sent for c in captured)  # the engine's exact ids
                bodies.clear()
            result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-2), verbose=False)
            assert result.metrics["trained_tokens"] > 0 and result.metrics["tokenize/spliced_turns"] == 8
            step = result.step
    finally:
        await backend.close()


@pytest.mark.slow
async def test_a_rollout_with_nothing_trainable_says_why(
    tiny_model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from art_train import LocalBackend

    backend = LocalBackend(path=tmp_path)
    model = art.TrainableModel(name="named", project="graph", base_model=str(tiny_model_path))
    await model.register(backend)
    try:
        # the app talks to ART's server, but to a served model that is not the trainable one (a base model
        # registered as a plain Model): nothing of it can be trained
        planner = art.Model(name="planner", project="graph", base_model=str(tiny_model_path))
        await planner.register(backend)
        llm = ChatOpenAI(model="planner", base_url=model.inference_base_url, api_key="k", max_tokens=4)
        app = build_app(llm)

        @art_graph.rollout
        async def run() -> float:
            await app.ainvoke({"messages": [("user", "Hi.")]})
            return 1.0

        with caplog.at_level(logging.WARNING, logger="art_graph"):
            traj = await run()
        assert traj.metadata["capture"]["trainable_turns"] == 0
        assert traj.metrics["untrainable_rollouts"] == 1.0
        warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        assert "nothing trainable" in warning and "'planner'" in warning and "'named'" in warning
    finally:
        await backend.close()
