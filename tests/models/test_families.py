"""Each family on a tiny random model of its architecture: tokenize -> train -> serve -> parse.

The model is taught one tool call by SFT (it is random, so it says nothing useful before), then
served through `LocalBackend`: the reply must come back as a parsed `tool_calls` list, the streamed
reply must carry the same calls and token ids, and a GRPO step on captured rollouts must pass the
weight-sync check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import art_core as art
from art_train import LocalBackend
from art_train.engines.base import ChatRequest

FAMILIES = ["qwen2.5", "qwen3", "llama3", "gptoss", "gemma3"]
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}}}
ASK = [{"role": "user", "content": "What is 2 + 3?"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
# Qwen3 is taught to think first: the reply keeps the <think> block in its content.
TAUGHT_CONTENT = {"qwen3": "<think>\nAdd them.\n</think>\n\n"}


def _calls(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


async def _stream(client, name: str) -> tuple[list[tuple[str, dict]], list[int], str | None]:
    stream = await client.chat.completions.create(
        model=name, messages=ASK, tools=[ADD], temperature=0, max_tokens=80, stream=True)
    calls, ids, finish = [], [], None
    async for chunk in stream:
        for choice in chunk.choices:
            ids += (choice.model_extra or {}).get("token_ids") or []
            for c in choice.delta.tool_calls or []:
                calls.append((c.function.name, json.loads(c.function.arguments)))
            finish = choice.finish_reason or finish
    return calls, ids, finish


@pytest.mark.parametrize("family", FAMILIES)
async def test_family_tokenize_train_serve_parse(family: str, tiny_family, tmp_path: Path) -> None:
    path = tiny_family(family)
    backend = LocalBackend(path=tmp_path, engine_dtype="float32")  # greedy replies exact, not bf16 near-ties
    model = art.TrainableModel(name=f"tiny-{family.replace('.', '')}", project="models", base_model=str(path),
                               config=art.ModelConfig(lora_rank=32, lora_alpha=64))
    try:
        await model.register(backend)
        client = model.openai_client()
        taught = art.Trajectory(
            messages=[*ASK, {"role": "assistant", "content": TAUGHT_CONTENT.get(family, ""), "tool_calls": [CALL]}],
            tools=[ADD])
        sft = await model.train_sft([taught], config=art.SFTConfig(learning_rate=5e-3, num_epochs=150, batch_size=1),
                                    verbose=False)
        assert sft.metrics["weight_sync/max_abs_diff"] < 2e-3

        r = await client.chat.completions.create(
            model=model.served_name(), messages=ASK, tools=[ADD], temperature=0, max_tokens=80, logprobs=True)
        choice = r.choices[0]
        assert _calls(choice.message) == [("add", {"a": 2, "b": 3})], choice.message
        assert choice.finish_reason == "tool_calls"
        if family == "qwen3":
            assert choice.message.content.startswith("<think>") and "Add them." in choice.message.content
        ids = choice.model_extra["token_ids"]

        calls, streamed_ids, finish = await _stream(client, model.served_name())
        assert calls == _calls(choice.message) and streamed_ids == ids and finish == "tool_calls"

        # Served logprobs match the trainer's on the same tokens (the prompt runs past sliding windows).
        entry = backend.service.entry(model.name)
        prompt = entry.engine.render(ChatRequest(messages=ASK, model=model.name, tools=[ADD]))
        assert len(prompt) > 32
        trained = entry.trainer.sequence_logprobs(prompt + ids, 1)[len(prompt) - 1:]
        served = [t.logprob for t in choice.logprobs.content]
        assert max(abs(a - b) for a, b in zip(trained, served, strict=True)) < 1e-3

        # A GRPO step on captured rollouts (tool calls in the history), then the weight-sync check.
        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                out = await client.chat.completions.create(
                    model=model.served_name(), messages=ASK, tools=[ADD], temperature=1.0, max_tokens=40, seed=i)
            traj.reward = float(bool(out.choices[0].message.tool_calls)) + 0.1 * i
            return traj

        groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(i) for i in range(3))],
                                                    show_progress=False)
        result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-3), verbose=False)
        assert result.step == 2
        assert result.metrics["weight_sync/max_abs_diff"] < 2e-3
        assert result.metrics["tokenize/spliced_turns"] == 3
    finally:
        await backend.close()


async def test_a_malformed_tool_call_is_served_as_content_and_counted(tiny_family, tmp_path: Path) -> None:
    """A model taught to emit a broken call: the reply keeps the text as content, says why in
    `tool_parse_error`, finishes with "stop", and `/metrics` counts it; nothing crashes."""
    import httpx

    bad = '<|python_tag|>{"name": "add", "parameters": {"a": 2,'
    backend = LocalBackend(path=tmp_path, engine_dtype="float32")
    model = art.TrainableModel(name="tiny-bad", project="models", base_model=str(tiny_family("llama3")),
                               config=art.ModelConfig(lora_rank=32, lora_alpha=64))
    try:
        await model.register(backend)
        taught = art.Trajectory(messages=[*ASK, {"role": "assistant", "content": bad}], tools=[ADD])
        await model.train_sft([taught], config=art.SFTConfig(learning_rate=5e-3, num_epochs=150, batch_size=1),
                              verbose=False)
        client = model.openai_client()
        r = await client.chat.completions.create(model=model.served_name(), messages=ASK, tools=[ADD],
                                                 temperature=0, max_tokens=40)
        choice = r.choices[0]
        assert choice.message.tool_calls is None and choice.message.content == bad
        assert choice.finish_reason == "stop" and "not valid JSON" in choice.model_extra["tool_parse_error"]
        stream = await client.chat.completions.create(model=model.served_name(), messages=ASK, tools=[ADD],
                                                      temperature=0, max_tokens=40, stream=True)
        text, flagged = "", False
        async for chunk in stream:
            for c in chunk.choices:
                text += c.delta.content or ""
                flagged |= bool((c.model_extra or {}).get("tool_parse_error"))
        assert text == bad and flagged
        base = str(client.base_url).rstrip("/").removesuffix("/v1")
        metrics = httpx.get(f"{base}/metrics").text
        assert 'art_tool_parse_errors_total{model="tiny-bad"} 2.0' in metrics
    finally:
        await backend.close()
