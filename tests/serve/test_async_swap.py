"""Async mode, serving side: inference is not held while a step trains, and a request that is in flight
when the new adapter is swapped in finishes on the adapter it started with."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import openai

import art_core as art
from art_train import LocalBackend
from art_train.engines.base import ChatRequest


async def test_a_request_in_flight_during_an_async_swap_finishes_on_its_start_adapter(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    backend = LocalBackend(path=tmp_path, device="cpu")
    model = art.TrainableModel(name="a", project="t", base_model=str(tiny_model_path),
                               config=art.ModelConfig(max_seq_len=512))
    try:
        await model.register(backend)
        client = model.openai_client()

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                r = await client.chat.completions.create(model="a", messages=[{"role": "user", "content": f"q{i % 2}"}],
                                                         max_tokens=8, seed=i)
            traj.reward = float(len(r.choices[0].message.content or "") % 3)
            return traj

        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(2 * g + i) for i in range(3)) for g in range(2)], show_progress=False)
        entry = backend.service.entry("a")
        engine = entry.engine
        real_decode = engine.scheduler.decode_step

        def slow_decode(batch):  # noqa: ANN001, ANN202 - the long request decodes for seconds
            time.sleep(0.03)
            return real_decode(batch)

        engine.scheduler.decode_step = slow_decode
        messages = [{"role": "user", "content": "tell a long story"}]
        raw = openai.AsyncOpenAI(base_url=f"{backend.url}/v1", api_key="x", max_retries=0)
        stream = await raw.chat.completions.create(model="a", messages=messages, max_tokens=300, seed=7, stream=True,
                                                   extra_body={"ignore_eos": True})
        started = asyncio.Event()

        async def consume() -> list:
            chunks = []
            async for chunk in stream:
                chunks.append(chunk)
                started.set()
            return chunks

        consumer = asyncio.ensure_future(consume())
        await started.wait()
        result = await model.train(groups, config=art.TrainConfig(learning_rate=5e-2, mode="async"), verbose=False)
        assert result.step == 1 and not consumer.done(), "the step waited for the request (sync mode would)"
        after = await client.chat.completions.create(model="a", messages=messages, max_tokens=2)
        assert after.model_extra["art_step"] == 1  # new requests get the new step at once
        chunks = await consumer
        del engine.scheduler.decode_step
        assert {c.model_extra["art_step"] for c in chunks} == {0}
        tokens = [t for c in chunks for ch in c.choices for t in (ch.model_extra.get("token_ids") or [])]
        sampled = [lp.logprob for c in chunks for ch in c.choices if ch.logprobs for lp in ch.logprobs.content]
        assert len(tokens) == len(sampled) == 300
        prompt = engine.render(ChatRequest(messages=messages, model="a"))
        seq = prompt + tokens

        async def served(step: int) -> list[float]:
            (out,) = await engine.sequences_logprobs([seq], f"a@{step}")
            return out[len(prompt) - 1:]

        under0, under1 = await backend._call(served(0)), await backend._call(served(1))
        off0 = max(abs(a - b) for a, b in zip(sampled, under0, strict=True))
        off1 = max(abs(a - b) for a, b in zip(sampled, under1, strict=True))
        # every token, first to last, came from step 0's weights (within KV-cache rounding; step 1 is far off)
        assert off0 < 0.01 and off1 > 10 * off0, (off0, off1)
    finally:
        await backend.close()
