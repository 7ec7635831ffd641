"""Acceptance: the OpenAI SDK, langchain-openai and litellm complete a chat with tools against `art serve`
and hand back the token ids the engine sampled."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

import art_core as art

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def registered(art_serve: str, tiny_model_path: Path) -> art.TrainableModel:
    model = art.TrainableModel(name="clients", project="serve", base_model=str(tiny_model_path))

    async def register() -> None:
        async with art.RemoteBackend(art_serve) as backend:
            await model.register(backend)

    asyncio.run(register())
    return model


def engine_sample(model: art.TrainableModel, seed: int, tools: list | None = TOOLS) -> dict:
    """What the engine sampled for this request, read from the raw HTTP response."""
    body = {"model": model.served_name(), "messages": MESSAGES, "tools": tools, "max_tokens": 12, "seed": seed}
    r = httpx.post(f"{model.inference_base_url}/chat/completions", json=body, timeout=60)
    r.raise_for_status()
    return r.json()


async def test_openai_sdk_with_tools(registered: art.TrainableModel) -> None:
    client = registered.openai_client()
    with art.capture() as traj:
        r = await client.chat.completions.create(model=registered.served_name(), messages=MESSAGES, tools=TOOLS,
                                                 max_tokens=12, seed=11)
    truth = engine_sample(registered, 11)
    assert r.choices[0].model_extra["token_ids"] == truth["choices"][0]["token_ids"]
    assert traj.turns[-1]["sample"]["token_ids"] == truth["choices"][0]["token_ids"]
    assert traj.tools == TOOLS
    without = engine_sample(registered, 11, tools=None)
    assert len(truth["prompt_token_ids"]) > len(without["prompt_token_ids"]) + 20  # tools are in the prompt


def test_langchain_chat_openai_with_tools(registered: art.TrainableModel) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=registered.served_name(), base_url=registered.inference_base_url, api_key="x",
                     max_tokens=12, seed=12, logprobs=True, extra_body={"return_tokens_as_token_ids": True})
    message = llm.bind_tools(TOOLS).invoke(MESSAGES)
    tokens = [c["token"] for c in message.response_metadata["logprobs"]["content"]]
    ids = [int(t.split(":", 1)[1]) for t in tokens]
    assert ids == engine_sample(registered, 12)["choices"][0]["token_ids"]


def test_litellm_with_tools(registered: art.TrainableModel) -> None:
    import litellm

    r = litellm.completion(**registered.litellm_params(), messages=MESSAGES, tools=TOOLS, max_tokens=12, seed=13,
                           logprobs=True, extra_body={"return_tokens_as_token_ids": True})
    choice = r.choices[0].model_dump() if hasattr(r.choices[0], "model_dump") else dict(r.choices[0])
    sample = art.sample_from_choice(choice)
    assert sample is not None
    assert sample.token_ids == engine_sample(registered, 13)["choices"][0]["token_ids"]
