"""The service and the HTTP surface on a fake engine (tests/support/fake_engine.py): no torch, no model.

What is checked here is the service's own behaviour: routing a served name to its engine, the
OpenAI body over real HTTP (plain and streamed), errors that name the problem, and the one gate
that holds a model's requests while it trains.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import openai
import pytest

import art_core as art
from art_train.engines.base import ChatRequest
from art_train.server import create_app
from art_train.service import ModelService, ServiceError
from tests.support.fake_engine import FunctionEngine
from tests.support.net import serve_in_thread

PROMPT = [{"role": "user", "content": "ping"}]


def _service(engine: FunctionEngine) -> ModelService:
    return ModelService(make_engine=lambda model: engine)


async def test_chat_routes_to_the_engine_over_real_http() -> None:
    engine = FunctionEngine(lambda messages: f"pong to {messages[-1]['content']}")
    service = _service(engine)
    await service.register(art.Model(name="judge", base_model="fake"))
    with serve_in_thread(create_app(service)) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x")
        r = await client.chat.completions.create(model="judge", messages=PROMPT, n=2)
        assert [c.message.content for c in r.choices] == ["pong to ping", "pong to ping"]
        assert r.model == "judge" and engine.requests[-1].adapter is None  # a plain model: no adapter
        chunks = [c async for c in await client.chat.completions.create(model="judge", messages=PROMPT, stream=True)]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "pong to ping"
        assert [m.id for m in (await client.models.list()).data] == ["judge"]
        with pytest.raises(openai.NotFoundError, match="not registered here"):
            await client.chat.completions.create(model="nobody", messages=PROMPT)
        with pytest.raises(openai.NotFoundError, match="not trainable; it has no steps to pin"):
            await client.chat.completions.create(model="judge@3", messages=PROMPT)
        with pytest.raises(openai.BadRequestError, match="messages"):
            await client.chat.completions.create(model="judge", messages=[])
    await service.close()
    assert engine.started and engine.stopped


async def test_the_service_gate_holds_requests_and_drains_those_in_flight() -> None:
    engine = FunctionEngine(lambda messages: "ok", delay=0.3)
    service = _service(engine)
    entry = await service.register(art.Model(name="m", base_model="fake"))
    request = lambda: service.chat("m", ChatRequest(messages=PROMPT, model="m"))  # noqa: E731
    first = asyncio.create_task(request())
    await asyncio.sleep(0.05)
    assert engine.in_flight == 1
    await entry.gate.hold()  # returns once the request in flight is done
    assert first.done() and engine.in_flight == 0
    waiting = asyncio.create_task(request())
    await asyncio.sleep(0.4)
    assert not waiting.done() and len(engine.requests) == 1  # held: never reached the engine
    entry.gate.resume()
    assert (await waiting)["choices"][0]["message"]["content"] == "ok"
    await service.close()


async def test_one_base_model_one_engine_and_clear_registration_errors() -> None:
    built = []

    def make(model: art.Model) -> FunctionEngine:
        built.append(model.name)
        return FunctionEngine(lambda messages: "x")

    service = ModelService(make_engine=make)
    await service.register(art.Model(name="a", base_model="fake"))
    await service.register(art.Model(name="b", base_model="fake"))
    assert built == ["a"]  # the second model shares the first one's engine
    with pytest.raises(ServiceError, match="already registered on 'fake'"):
        await service.register(art.Model(name="a", base_model="other"))
    with pytest.raises(ServiceError, match="has no base_model"):
        await service.register(art.Model(name="c"))
    await service.close()


def test_the_service_and_http_app_run_without_torch() -> None:
    code = textwrap.dedent(
        """
        import asyncio, sys
        import openai
        import art_core as art
        from art_train.server import create_app
        from art_train.service import ModelService
        from tests.support.fake_engine import FunctionEngine
        from tests.support.net import serve_in_thread

        async def main():
            service = ModelService(make_engine=lambda model: FunctionEngine(lambda m: "hi"))
            await service.register(art.Model(name="m", base_model="fake"))
            with serve_in_thread(create_app(service)) as url:
                client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x")
                r = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
                assert r.choices[0].message.content == "hi"
            await service.close()

        asyncio.run(main())
        heavy = [m for m in ("torch", "transformers", "peft") if m in sys.modules]
        assert not heavy, heavy
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=Path(__file__).resolve().parents[2])


def test_drift_warning_follows_the_engines_precision(caplog: pytest.LogCaptureFixture) -> None:
    from art_train.swap import drift_limit, sync_tolerance, warn_drift

    engine = FunctionEngine(lambda messages: "ok")
    config = art.ModelConfig()

    def limit() -> float:
        return drift_limit(engine, sync_tolerance(engine, config, "cpu", None))

    drift = {"sampler_drift/mean_abs": 0.15, "sampler_drift/max_abs": 0.9, "sampler_drift/tokens": 40}
    assert limit() == 0.1  # float32 on CPU: exact weight sync, the plain threshold
    with caplog.at_level("WARNING", logger="art_train.swap"):
        warn_drift("m", drift, limit())
    assert "differ from the trainer's by 0.150" in caplog.text and "warning above 0.1 " in caplog.text
    caplog.clear()
    engine.sync_reference_dtype = "bfloat16"  # the embedded engine sampling in bfloat16 against a float32 trainer
    assert limit() == 0.2
    engine.sync_reference_dtype = None
    engine.sync_tolerance = 0.5  # vLLM on CPU: its precision's noise is far above 0.1
    assert limit() == 1.0
    with caplog.at_level("WARNING", logger="art_train.swap"):
        warn_drift("m", drift, limit())
        warn_drift("m", {}, limit())  # an SFT step has no drift metrics
    assert caplog.text == ""
