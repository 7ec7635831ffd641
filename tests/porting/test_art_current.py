"""OpenPipe ART's current names (issue 43): `wrap_rollout` / `init_chat_model`, `generate_scenarios`,
`PipelineTrainer(rollout_fn=, scenarios=, ...)`; accepted where they mean what ours mean, refused by name
where they do not."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import art_core as art
import art_graph
import art_mcp
from tests.core.test_pipeline import SlowBackend
from tests.support.scripted_openai import ScriptedOpenAI

from .art_current_style import main

TASKS = [
    {"task": "What is 2 plus 40? Add them up.", "difficulty": 1, "tools": ["add"]},
    {"task": "Add 7 and 35, then report the sum.", "difficulty": 2, "tools": ["add"]},
    {"task": "Sum 19 and 23 and explain the result.", "difficulty": 3, "tools": ["add"]},
    {"task": "Compute 100 plus 11 using the tool.", "difficulty": 2, "tools": ["add"]},
]


def generator(body: dict) -> dict:
    return {"content": json.dumps({"tasks": TASKS})}


def echo(body: dict) -> dict:
    return {"content": f"re: {body['messages'][-1]['content']}"}


def test_art_current_style_loop_runs_with_only_its_imports_changed(tiny_model_path: Path, tmp_path: Path) -> None:
    with ScriptedOpenAI(generator) as server:
        out = asyncio.run(main(str(tiny_model_path), str(tmp_path), server.url))
        request = server.requests[0]
    assert request["model"] == "openai/gpt-4.1-mini"  # ART's generator_model, sent as it is
    prompt = request["messages"][0]["content"]
    assert "notes://today" in prompt and "Keep every task about arithmetic." in prompt
    assert [(s.task, s.difficulty) for s in out["scenarios"]] == [(t["task"], t["difficulty"]) for t in TASKS]
    assert out["result"].step == 1 and out["result"].metrics["trained_tokens"] > 0
    for group in out["groups"]:
        for t in group.trajectories:
            turns = [m for m in t.turns if m["role"] == "assistant"]
            assert len(turns) == 1 and art.message_sample(turns[0]) is not None  # sampled ids, via LangGraph
            assert t.turns[0]["content"] in {s.task for s in out["scenarios"]}
            assert t.metadata["difficulty"] in {1, 2}
    assert [r.step for r in out["pipelined"]] == [2]  # max_steps=1 more step, from ART's keywords
    assert out["pipelined"][0].metrics["trained_tokens"] > 0
    history = art.RunDir("port", "port-graph", root=tmp_path).read_trajectories("train", 2)
    assert {g.trajectories[0].turns[0]["content"] for g in history} == {t["task"] for t in TASKS[2:]}


async def test_wrap_rollout_captures_init_chat_model_calls_into_the_returned_trajectory() -> None:
    model = art.TrainableModel(name="agent", project="t", base_model="x", inference_api_key="k")
    with ScriptedOpenAI(echo) as server:
        model.inference_base_url = server.url

        async def run(question: str) -> art.Trajectory:
            llm = art_graph.init_chat_model(model.get_inference_name(), timeout_seconds=5, max_tokens=3)
            assert llm.temperature == 1.0 and llm.request_timeout == 5  # ART's default temperature
            await llm.ainvoke(question)
            return art.Trajectory(messages_and_choices=[], reward=0.5)

        traj = await art_graph.wrap_rollout(model, run)("hi")
        body = server.requests[0]
    assert traj.reward == 0.5 and [m["content"] for m in traj.turns] == ["hi", "re: hi"]
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 3 and body["logprobs"] is True
    with pytest.raises(RuntimeError, match=r"inside a function wrapped by art_graph.wrap_rollout"):
        art_graph.init_chat_model()  # the wrapper's model is gone once it returns


async def test_langgraph_port_refusals_name_the_argument() -> None:
    model = art.TrainableModel(name="agent", project="t", base_model="x", inference_base_url="http://127.0.0.1:1/v1")

    async def ask(**kwargs: object) -> art.Trajectory:
        art_graph.init_chat_model(**kwargs)  # type: ignore[arg-type]
        return art.Trajectory(reward=0.0)

    cases = {
        "other-model": (dict(model="gpt-4.1"), r"model='gpt-4.1'.*art_graph.chat_model\(other_model\)"),
        "base_url": (dict(base_url="http://x"), r"base_url=.*art_graph.chat_model\(other_model\)"),
        "fields": (dict(configurable_fields=("model",)), r"configurable_fields"),
    }
    for kwargs, message in cases.values():
        with pytest.raises(TypeError, match=message):
            await art_graph.wrap_rollout(model, ask)(**kwargs)
    with pytest.raises(TypeError, match=r"wraps an async function.*@art_graph.rollout"):
        art_graph.wrap_rollout(model, lambda: None)  # type: ignore[arg-type,return-value]


async def test_generate_scenarios_refuses_too_few_and_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(ValueError, match="generator_api_key is required, or set OPENROUTER_API_KEY"):
        await art_mcp.generate_scenarios([{"name": "add"}])
    with ScriptedOpenAI(generator) as server:
        with pytest.raises(art_mcp.TaskGenerationError, match="expected 6 scenarios, got 4"):
            await art_mcp.generate_scenarios([{"name": "add"}], num_scenarios=6, generator_api_key="x",
                                             generator_base_url=server.url, show_preview=False)
        tools = server.requests[0]["messages"][0]["content"]
    assert '"name": "add"' in tools  # ART's {name, description, parameters} became an OpenAI spec


def _trainer(model: art.TrainableModel, **kwargs: object) -> art.PipelineTrainer:
    async def rollout_fn(model: art.TrainableModel, scenario: int, config: dict) -> art.TrajectoryGroup:
        return art.TrajectoryGroup(
            art.Trajectory(messages=[{"role": "user", "content": f"task {scenario}"}],
                           reward=float(i + config["bonus"]), metadata={"task": scenario})
            for i in range(2)
        )

    return art.PipelineTrainer(model=model, rollout_fn=rollout_fn, config={"bonus": 1}, **kwargs)  # type: ignore[arg-type]


async def test_pipeline_trainer_takes_arts_keywords(tmp_path: Path) -> None:
    backend = SlowBackend(tmp_path)
    model = art.TrainableModel(name="p", project="p", base_model="tiny")
    evals: list[int] = []

    async def eval_fn(model: art.TrainableModel, step: int, config: dict) -> list[art.Trajectory]:
        evals.append(step)
        return [art.Trajectory(messages=[{"role": "user", "content": "v"}], reward=float(step))]

    async def endless():  # ART's scenarios may be an async iterator that never ends
        n = 0
        while True:
            yield n
            n += 1

    trainer = _trainer(model, backend=backend, scenarios=endless(), min_batch_size=2, max_steps=3,
                       learning_rate=2e-5, loss_fn="ppo", kl_penalty_coef=0.1, normalize_advantages=False,
                       eval_fn=eval_fn, eval_every_n_steps=2, pipeline={"max_steps_off_policy": 0},
                       num_rollout_workers=1, log_interval_seconds=5.0)
    results = await trainer.train()  # registers the model with backend= itself
    assert [r.step for r in results] == [1, 2, 3]
    assert [s["tasks"] for s in backend.steps] == [[0, 1], [2, 3], [4, 5]]  # in order, a group each
    config = backend.steps[0]["config"]
    assert (config.learning_rate, config.loss, config.beta, config.scale_rewards) == (2e-5, "grpo", 0.1, False)
    assert config.max_steps_off_policy == 0 and config.mode == "async"
    assert evals == [0, 2]  # eval_at_start (ART's default), then every 2 steps
    history = art.RunDir("p", "p", root=tmp_path).read_trajectories("val", 2)
    assert history[0].trajectories[0].reward == 2.0

    resumed = _trainer(model, scenarios=range(10), min_batch_size=2, max_steps=1, eval_at_start=False)
    assert [r.step for r in await resumed.train()] == [4]
    assert backend.steps[-1]["tasks"] == [6, 7]  # the 3 trained steps' scenarios passed over
    assert backend.steps[-1]["config"].loss == "cispo"  # ART's default loss


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(autotune=object()), r"autotune=.*max_steps_off_policy="),
        (dict(loss_fn_config={"x": 1}), r"loss_fn_config=.*TrainConfig's fields"),
        (dict(checkpoint_retention_strategy=max), r"checkpoint_retention_strategy=.*delete_checkpoints"),
        (dict(max_batch_size=8), r"max_batch_size=8.*min_batch_size"),
        (dict(save_checkpoint=False), r"save_checkpoint=False.*every step is checkpointed"),
        (dict(resume=False), r"resume=False.*model.get_step"),
        (dict(loss_fn="dro"), r"loss_fn='dro'.*one of"),
        (dict(pipeline={"queue_maxsize": 4}), r"queue_maxsize=4.*max_steps_off_policy"),
        (dict(rollout=lambda m, t: None), r"either ours .* or ART's"),
    ],
)
async def test_pipeline_trainer_refuses_arts_keywords_it_cannot_honour(kwargs: dict, message: str) -> None:
    model = art.TrainableModel(name="p", project="p", base_model="tiny")
    with pytest.raises(TypeError, match=message):
        _trainer(model, scenarios=[1, 2], min_batch_size=2, **kwargs)


async def test_pipeline_trainer_refuses_handle_signals_and_a_foreign_config(tmp_path: Path) -> None:
    model = art.TrainableModel(name="p", project="p", base_model="tiny")
    with pytest.raises(TypeError, match=r"handle_signals=True.*Ctrl-C"):
        await _trainer(model, scenarios=[1]).train(handle_signals=True)

    async def rollout(model: art.Model, task: int) -> art.Trajectory:
        return art.Trajectory(reward=0.0)

    with pytest.raises(TypeError, match=r"config is a TrainConfig, got dict .*rollout_fn="):
        art.PipelineTrainer(model, rollout, [1], config={"n": 2})
