"""A loop written the way OpenPipe ART's current docs write it: `art.mcp.generate_scenarios` for the
tasks, a LangGraph agent whose chat model comes from `init_chat_model` inside `wrap_rollout`,
`backend.train(model, groups, learning_rate=...)` for one step, then `PipelineTrainer(model=,
backend=, rollout_fn=, scenarios=, ...)` and `await trainer.train()` for the next.

Only the imports differ from ART (kept in the block below, with ART's lines in comments).
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, MessagesState, StateGraph

# --- the only lines that changed ------------------------------------------------------------------
import art_core as art  # was: import art
from art_core import PipelineTrainer  # was: from art.pipeline_trainer import PipelineTrainer
from art_graph import (  # was: from art.langgraph import init_chat_model, wrap_rollout
    init_chat_model,
    wrap_rollout,
)
from art_mcp import generate_scenarios  # was: from art.mcp import generate_scenarios
from art_train import LocalBackend  # was: from art.local import LocalBackend

# ---------------------------------------------------------------------------------------------------

TOOLS = [
    {"name": "add", "description": "Add two numbers.",
     "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
]


async def rollout(model: art.Model, scenario: Any) -> art.Trajectory:
    chat_model = init_chat_model(model.get_inference_name(), temperature=1.0, max_tokens=4)

    async def agent(state: MessagesState) -> dict:
        return {"messages": [await chat_model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    state = await graph.compile().ainvoke({"messages": [("user", scenario.task)]})
    reply = state["messages"][-1].content
    return art.Trajectory(messages_and_choices=[], reward=len(reply) % 3 / 2,
                          metadata={"difficulty": scenario.difficulty})


async def rollout_fn(model: art.TrainableModel, scenario: Any, config: dict) -> art.TrajectoryGroup:
    return await art.TrajectoryGroup(wrap_rollout(model, rollout)(model, scenario) for _ in range(config["n"]))


async def main(base_model: str, path: str, generator_url: str) -> dict[str, Any]:
    scenarios = await generate_scenarios(
        TOOLS,
        resources=[{"uri": "notes://today", "name": "today", "description": "Today's notes"}],
        num_scenarios=4,
        custom_instructions="Keep every task about arithmetic.",
        generator_api_key="x",
        generator_base_url=generator_url,
    )
    train_scenarios, _val = scenarios.split(train_size=4)
    model = art.TrainableModel(name="port-graph", project="port", base_model=base_model)
    with LocalBackend(path=path) as backend:
        await model.register(backend)
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(wrap_rollout(model, rollout)(model, s) for _ in range(2)) for s in train_scenarios[:2]),
            pbar_desc="gather",
        )
        result = await backend.train(model, groups, learning_rate=1e-4)
        await model.log(groups, metrics=result.metrics, step=result.step)

        trainer = PipelineTrainer(
            model=model,
            backend=backend,
            rollout_fn=rollout_fn,
            scenarios=iter(train_scenarios),  # the first step's two are passed over
            config={"n": 2},
            learning_rate=1e-4,
            min_batch_size=2,
            max_steps=1,
            max_steps_off_policy=1,
            eval_at_start=False,
        )
        pipelined = await trainer.train()
    return {"scenarios": scenarios, "groups": groups, "result": result, "pipelined": pipelined}
