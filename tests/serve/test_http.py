"""The HTTP surface: errors in OpenAI's shape, the API key, streaming, sampling, batching, weight sync."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import openai
import pytest
import torch
from safetensors.torch import load_file, save_file

import art_core as art
from art_train import LocalBackend
from art_train.engines import hermes
from art_train.service import WeightSyncError

PROMPT = [{"role": "user", "content": "Tell me a story."}]


@pytest.fixture
async def served(tiny_model_path: Path, tmp_path: Path):
    # float32 whatever the CPU: the batching test compares a batched draw with a solo one token for token
    backend = LocalBackend(path=tmp_path, engine_dtype="float32")
    model = art.TrainableModel(name="http", project="serve", base_model=str(tiny_model_path))
    await model.register(backend)
    yield backend, model
    await backend.close()


async def test_bad_requests_get_openai_errors_and_the_server_stays_up(served) -> None:
    backend, model = served
    async with httpx.AsyncClient(base_url=f"{backend.url}/v1") as http:
        r = await http.post("/chat/completions", json={"model": "nope", "messages": PROMPT})
        assert r.status_code == 404 and "not registered" in r.json()["error"]["message"]
        r = await http.post("/chat/completions", json={"model": "http@9", "messages": PROMPT})
        assert r.status_code == 404 and "no checkpoint 9" in r.json()["error"]["message"]
        r = await http.post("/chat/completions", json={"model": "http"})
        assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
        r = await http.post("/chat/completions", json={"model": "http", "messages": PROMPT, "temperature": -1})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = await http.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        r = await http.post("/chat/completions", json={"model": "http", "messages": [{"role": "robot", "content": "x"}]})
        assert r.status_code == 400
        r = await http.post("/chat/completions", json={"model": "http", "messages": PROMPT, "max_tokens": 3})
        assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 3
        models = (await http.get("/models")).json()
        assert [m["id"] for m in models["data"]] == ["http"]
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="missing", messages=PROMPT)


async def test_api_key_is_enforced(tiny_model_path: Path, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from art_train import ModelService, create_app

    app = create_app(ModelService(path=tmp_path), api_key="sekrit")
    with TestClient(app) as http:
        r = http.get("/v1/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert http.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/v1/models", headers={"Authorization": "Bearer sekrit"}).status_code == 200


async def test_sampling_parameters(served) -> None:
    backend, model = served
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")
    name = model.served_name()
    a = await client.chat.completions.create(model=name, messages=PROMPT, max_tokens=10, seed=7, n=2)
    b = await client.chat.completions.create(model=name, messages=PROMPT, max_tokens=10, seed=7, n=2)
    ids = [c.model_extra["token_ids"] for c in a.choices]
    assert ids == [c.model_extra["token_ids"] for c in b.choices]  # the seed fixes the draw
    assert ids[0] != ids[1]  # choice i uses seed + i
    assert a.usage.completion_tokens == 20 and {c.finish_reason for c in a.choices} == {"length"}
    greedy = await client.chat.completions.create(model=name, messages=PROMPT, max_tokens=5, temperature=0,
                                                  logprobs=True, top_logprobs=3)
    content = greedy.choices[0].logprobs.content
    assert all(c.top_logprobs[0].logprob == pytest.approx(c.logprob) for c in content)  # greedy picks the top one
    first = greedy.choices[0].message.content
    stop = first[2:6]
    stopped = await client.chat.completions.create(model=name, messages=PROMPT, max_tokens=5, temperature=0, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop" and stopped.choices[0].message.content == first[: first.index(stop)]
    top_p = await client.chat.completions.create(model=name, messages=PROMPT, max_tokens=5, top_p=1e-6)
    assert top_p.choices[0].model_extra["token_ids"] == greedy.choices[0].model_extra["token_ids"]


async def test_streaming_matches_token_ids(served) -> None:
    backend, model = served
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")
    stream = await client.chat.completions.create(model=model.served_name(), messages=PROMPT, max_tokens=12,
                                                  seed=3, stream=True)
    text, ids, steps = "", [], set()
    async for chunk in stream:
        steps.add(chunk.model_extra.get("art_step"))
        for c in chunk.choices:
            text += c.delta.content or ""
            ids += c.model_extra.get("token_ids") or []
    whole = await client.chat.completions.create(model=model.served_name(), messages=PROMPT, max_tokens=12, seed=3)
    assert ids == whole.choices[0].model_extra["token_ids"]
    assert text == whole.choices[0].message.content
    assert steps == {0}


async def test_concurrent_requests_are_decoded_together(served) -> None:
    backend, model = served
    engine = backend.service.entry("http").engine
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")
    before = dict(engine.stats)
    replies = await asyncio.gather(*[
        client.chat.completions.create(model=model.served_name(), messages=PROMPT, max_tokens=24, seed=i)
        for i in range(8)])
    assert all(len(r.choices[0].model_extra["token_ids"]) == 24 for r in replies)
    steps = engine.stats["decode_steps"] - before["decode_steps"]
    assert engine.stats["max_batch"] >= 4
    assert steps < 8 * 23  # one by one would take 8 x 23 decode steps
    alone = await client.chat.completions.create(model=model.served_name(), messages=PROMPT, max_tokens=24, seed=5)
    assert alone.choices[0].model_extra["token_ids"] == replies[5].choices[0].model_extra["token_ids"]


async def test_wrong_adapter_fails_the_weight_sync_check(served, tmp_path: Path) -> None:
    backend, model = served
    service = backend.service
    entry = service.entry("http")
    wrong = entry.rundir.path / "wrong-adapter"  # adapters load only from inside the run directory
    shutil.copytree(entry.rundir.checkpoint_path(0), wrong)
    tensors = load_file(wrong / "adapter_model.safetensors")
    torch.manual_seed(0)
    tensors = {k: (torch.randn_like(v) * 0.5 if "lora_B" in k else v) for k, v in tensors.items()}
    save_file(tensors, wrong / "adapter_model.safetensors")

    async def check(path: Path | None):
        return await entry.swap.load_and_verify(0, path)

    with pytest.raises(WeightSyncError, match="weight-sync check failed for http@0"):
        await backend._call(check(wrong))
    ok = await backend._call(check(None))  # the true checkpoint passes again
    assert ok["weight_sync/max_abs_diff"] < 2e-3


def test_hermes_parser() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    parsed = hermes(text)
    assert parsed.content == "Let me look."
    assert parsed.tool_calls[0]["function"]["name"] == "get_weather"
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert hermes("<tool_call>{not json}</tool_call>").tool_calls == []
    assert hermes("plain").content == "plain"


async def test_one_token_replies_leave_no_empty_batch(served, caplog: pytest.LogCaptureFixture) -> None:
    backend, model = served
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")
    with caplog.at_level("ERROR", logger="art_train.engines.transformers.scheduler"):
        for _ in range(3):  # every row finishes at prefill; the worker must not decode the empty batch
            r = await client.chat.completions.create(model=model.served_name(), messages=PROMPT, max_tokens=1)
            assert len(r.choices[0].model_extra["token_ids"]) == 1
    assert not [rec for rec in caplog.records if "decoding failed" in rec.getMessage()]


async def test_weight_sync_probe_never_rewrites_a_model_copy_in_use(served, tmp_path: Path) -> None:
    backend, model = served
    engine = backend.service.entry("http").engine
    for i in range(2):  # two more adapters with real (random) weights: the copies run out (max_models=3)
        path = tmp_path / f"other-{i}"
        shutil.copytree(backend.service.entry("http").rundir.checkpoint_path(0), path)
        torch.manual_seed(i)
        tensors = {k: (torch.randn_like(v) if "lora_B" in k else v)
                   for k, v in load_file(path / "adapter_model.safetensors").items()}
        save_file(tensors, path / "adapter_model.safetensors")
        await backend._call(engine.load_adapter(f"other-{i}", path))
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")

    async def reply():
        return await client.chat.completions.create(model=model.served_name(), messages=PROMPT, max_tokens=96,
                                                    seed=3, extra_body={"ignore_eos": True})

    alone = await reply()

    async def probes() -> None:
        for _ in range(6):  # while the reply decodes, probe the other adapters (each needs a copy)
            for i in range(2):
                await backend._call(engine.sequence_logprobs([1, 2, 3, 4], f"other-{i}"))

    during, _ = await asyncio.gather(reply(), probes())
    assert during.choices[0].model_extra["token_ids"] == alone.choices[0].model_extra["token_ids"]
