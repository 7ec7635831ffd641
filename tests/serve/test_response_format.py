"""`response_format` on the embedded engine: the tiny random model writes garbage unconstrained, valid JSON with it.

The schemas bound their strings and lists (as a judge's schema need not): a random model inside an
unbounded string rarely picks the closing quote, and would run to max_tokens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import openai
import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field

import art_core as art
from art_train import LocalBackend
from art_train.engines.base import ChatRequest, EngineError, SamplingParams
from art_train.engines.grammar import Grammars, mask_logits, schema_for
from art_train.engines.transformers import TransformersEngine
from art_train.engines.vllm_engine import VLLMEngine

pytest.importorskip("xgrammar")

PROMPT = [{"role": "user", "content": "Score the two trajectories."}]


class Score(BaseModel):  # RULER's TrajectoryScore, its strings bounded
    model_config = ConfigDict(extra="forbid")
    trajectory_id: str = Field(max_length=4)
    explanation: str = Field(max_length=16)
    score: float = Field(ge=0, le=1)


class Answer(BaseModel):  # RULER's JudgeAnswer: a required list of objects
    model_config = ConfigDict(extra="forbid")
    scores: list[Score] = Field(min_length=1, max_length=3)


ANSWER = {"type": "json_schema", "json_schema": {"name": "Answer", "schema": Answer.model_json_schema()}}


@pytest.fixture
async def served(tiny_model_path: Path, tmp_path: Path):
    backend = LocalBackend(path=tmp_path, engine_dtype="float32")
    model = art.Model(name="judge", project="serve", base_model=str(tiny_model_path))
    await model.register(backend)
    yield backend, model
    await backend.close()


@pytest.fixture
async def engine(tiny_model_path: Path):
    engine = TransformersEngine(str(tiny_model_path), dtype="float32")
    await engine.start()
    yield engine
    await engine.stop()


async def test_json_schema_replies_validate_greedy_sampled_and_streamed(served) -> None:
    backend, model = served
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")
    name = model.served_name()
    plain = await client.chat.completions.create(model=name, messages=PROMPT, max_tokens=30, temperature=0)
    with pytest.raises(ValueError):  # the tiny random model's own reply is no JSON
        json.loads(plain.choices[0].message.content)
    greedy = await client.chat.completions.create(
        model=name, messages=PROMPT, max_tokens=200, temperature=0, response_format=ANSWER
    )
    sampled = await client.chat.completions.create(
        model=name, messages=PROMPT, max_tokens=200, temperature=1.0, n=2, seed=5, response_format=ANSWER
    )
    choices = [*greedy.choices, *sampled.choices]
    assert [c.finish_reason for c in choices] == ["stop"] * 3
    answers = [Answer.model_validate_json(c.message.content) for c in choices]
    assert (
        sampled.choices[0].message.content != sampled.choices[1].message.content
    )  # each choice its own matcher
    assert all(len(a.scores) >= 1 for a in answers)
    stream = await client.chat.completions.create(
        model=name, messages=PROMPT, max_tokens=200, temperature=0, response_format=ANSWER, stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == greedy.choices[0].message.content


async def test_max_tokens_cuts_the_json_with_finish_reason_length(served) -> None:
    backend, model = served
    client = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x")
    cut = await client.chat.completions.create(
        model=model.served_name(), messages=PROMPT, max_tokens=4, temperature=0, response_format=ANSWER
    )
    assert cut.choices[0].finish_reason == "length" and len(cut.choices[0].model_extra["token_ids"]) == 4
    assert cut.choices[0].message.content.startswith("{")
    with pytest.raises(ValueError):
        json.loads(cut.choices[0].message.content)


async def test_bad_response_format_is_a_400_and_the_server_stays_up(served) -> None:
    backend, model = served
    body = {"model": model.served_name(), "messages": PROMPT, "max_tokens": 3}
    async with httpx.AsyncClient(base_url=f"{backend.url}/v1", timeout=60) as http:
        for fmt, says in [({"type": "regex", "regex": "a+"}, "response_format.type 'regex' is not supported"),
                          ({"type": "json_schema", "json_schema": {"name": "x"}}, "json_schema.schema is missing"),
                          ({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}},
                           'could not be compiled: Unsupported type "nonsense"')]:  # fmt: skip
            r = await http.post("/chat/completions", json={**body, "response_format": fmt})
            error = r.json()["error"]
            assert r.status_code == 400 and error["type"] == "invalid_request_error", r.text
            assert (
                says in error["message"] and '{"type": "json_object"}' in error["message"]
            )  # what is supported
        r = await http.post("/chat/completions", json={**body, "response_format": "json"})
        assert r.status_code == 400 and "response_format" in r.json()["error"]["message"]
        r = await http.post("/chat/completions", json={**body, "response_format": {"type": "text"}})
        assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 3


async def test_json_object_replies_are_objects(engine: TransformersEngine) -> None:
    request = ChatRequest(messages=PROMPT, model="m", sampling=SamplingParams(temperature=1.0, max_tokens=24, n=32, seed=0),
                          response_format={"type": "json_object"})  # fmt: skip
    reply = await engine.chat(request)
    done = [c for c in reply["choices"] if c["finish_reason"] == "stop"]
    assert done, "no choice of 32 closed its object in 24 tokens"
    assert all(isinstance(json.loads(c["message"]["content"]), dict) for c in done)
    assert all(c["message"]["content"].startswith("{") for c in reply["choices"])


async def test_reported_logprobs_are_the_models_own_not_the_masked_ones(engine: TransformersEngine) -> None:
    request = ChatRequest(
        messages=PROMPT,
        model="m",
        sampling=SamplingParams(temperature=0, max_tokens=200),
        response_format=ANSWER,
    )
    choice = (await engine.chat(request))["choices"][0]
    prompt = engine.render(request)
    served = [e["logprob"] for e in choice["logprobs"]["content"]]
    recomputed = (await engine.sequence_logprobs(prompt + choice["token_ids"], None))[len(prompt) - 1 :]
    assert served == pytest.approx(recomputed, abs=1e-4)  # what the trainer will compute for these tokens
    assert max(served) < -1  # masked, a forced token (the opening "{") would have had logprob 0


async def test_mask_logits_on_hand_made_logits(engine: TransformersEngine) -> None:
    tok = engine.tokenizer
    hello, brace, close = (tok.convert_tokens_to_ids(t) for t in ("hello", "{", "}"))
    logits = torch.zeros(2, engine.model.config.vocab_size)
    logits[:, hello], logits[:, close], logits[:, brace] = 10.0, 5.0, 1.0  # a model that would say "hello"
    (matcher,) = engine.grammars.matchers(schema_for({"type": "json_object"}), n=1)
    masked = mask_logits(logits, [matcher, None])
    assert masked[0].argmax() == brace and masked[1].argmax() == hello  # row 1 has no format: untouched
    assert logits[0].argmax() == hello  # the input is left as it was
    assert matcher.accept_token(brace)
    assert mask_logits(logits, [matcher])[0].argmax() == close
    assert matcher.accept_token(close)
    allowed = mask_logits(logits, [matcher])[0].isfinite().nonzero()[:, 0].tolist()
    assert set(allowed) <= engine.eos_ids  # the object is whole: only a stop token may follow


BOUNDED = {"type": "json_schema", "json_schema": {"name": "s", "schema": {
    "type": "object", "properties": {"e": {"type": "string", "minLength": 1, "maxLength": 3}},
    "required": ["e"], "additionalProperties": False}}}  # fmt: skip


async def test_bounded_strings_admit_no_raw_control_character(engine: TransformersEngine) -> None:
    """xgrammar compiles maxLength to a class that admits a raw tab, which is not JSON (a judge's
    explanation in CI had one); the engine compiles the bounds as a pattern that keeps to JSON."""

    def whole(text: str) -> bool:
        (matcher,) = engine.grammars.matchers(schema_for(BOUNDED), n=1)
        return matcher.accept_string(text) and matcher.is_completed()

    assert whole('{"e": "abc"}') and whole('{"e": "é"}') and json.loads('{"e": "é"}')
    assert not whole('{"e": "a\tb"}') and not whole('{"e": "abcd"}') and not whole('{"e": ""}')
    tok = engine.tokenizer
    (tab,) = tok.encode("\t", add_special_tokens=False)
    logits = torch.zeros(1, engine.model.config.vocab_size)
    logits[0, tab] = 10.0  # a model that would write a tab next
    (matcher,) = engine.grammars.matchers(schema_for(BOUNDED), n=1)
    assert matcher.accept_string('{"e": "a')
    masked = mask_logits(logits, [matcher])
    assert masked[0, tab] == float("-inf") and masked[0].isfinite().sum() > 1000


def test_missing_xgrammar_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # import xgrammar raises ImportError
    with pytest.raises(EngineError, match=r"pip install xgrammar") as info:
        Grammars(tokenizer=None, vocab_size=8, stop_ids=[0]).matchers('{"type": "object"}', n=1)
    assert info.value.status == 501


def test_vllm_engine_passes_response_format_on() -> None:
    body = VLLMEngine("unused")._body(ChatRequest(messages=PROMPT, model="m", response_format=ANSWER))
    assert body["response_format"] == ANSWER
