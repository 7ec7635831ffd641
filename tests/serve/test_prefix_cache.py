"""The embedded engine's prefix cache: multi-turn prompts reuse earlier turns' keys and values exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from art_train.engines.base import ChatRequest, SamplingParams
from art_train.engines.prefix import MIN_REUSE, PrefixCache
from art_train.engines.transformers import TransformersEngine


def _kv(n: int, fill: float = 0.0) -> list[torch.Tensor]:
    return [torch.full((2, n, 4), fill) for _ in range(3)]


def test_lookup_finds_the_longest_common_prefix_and_leaves_one_token_to_feed() -> None:
    cache = PrefixCache(max_bytes=1 << 20)
    short, long = list(range(100, 130)), list(range(100, 160))
    assert cache.store(None, 0, short, _kv(30), _kv(30))
    assert cache.store("a", 0, long, _kv(60), _kv(60))
    entry, n = cache.lookup(None, [*range(100, 125), 7, 8])
    assert entry is not None and n == 25 and entry.tokens.tolist() == short
    assert cache.lookup(None, short)[1] == 29  # the whole prompt cached: its last token is fed again
    assert cache.lookup("a", long + [1])[1] == 60 and cache.lookup("b", long)[0] is None  # per adapter
    assert cache.lookup(None, [1] * 40) == (None, 0)
    assert cache.lookup(None, short[: MIN_REUSE - 1] + [0] * 20) == (None, 0)  # too short to be worth it


def test_extended_entries_are_replaced_the_oldest_evicted_and_reloads_forgotten() -> None:
    per = sum(t.numel() * t.element_size() for t in _kv(40) * 2) + 40 * 8
    cache = PrefixCache(max_bytes=2 * per)
    turn1, turn2 = list(range(200, 230)), list(range(200, 240))
    cache.store(None, 0, turn1, _kv(30), _kv(30))
    cache.store(None, 0, turn2, _kv(40), _kv(40))
    assert len(cache) == 1  # turn 2 extends turn 1: one entry per conversation
    cache.store(None, 0, list(range(300, 340)), _kv(40), _kv(40))
    cache.store(None, 0, list(range(400, 440)), _kv(40), _kv(40))
    assert len(cache) == 2 and cache.nbytes <= cache.max_bytes
    assert cache.lookup(None, turn2 + [1])[0] is None  # the least recently used went first
    gen = cache.generation("a")
    cache.store("a", gen, turn2, _kv(40), _kv(40))
    cache.drop("a")
    assert cache.lookup("a", turn2 + [1])[0] is None
    assert not cache.store("a", gen, turn2, _kv(40), _kv(40))  # started before the reload: stale


def _conversations(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "system", "content": "You answer questions about numbers in one short line."},
             {"role": "user", "content": f"What comes after {i * 7}? Say it twice."}] for i in range(n)]  # fmt: skip


async def _two_turns(engine: TransformersEngine, convos: list[list[dict[str, str]]]) -> list[dict]:
    greedy = SamplingParams(temperature=0.0, max_tokens=6)

    async def turn(messages: list[dict[str, str]]) -> dict:
        return await engine.chat(ChatRequest(messages=messages, model="m", sampling=greedy))

    first = await asyncio.gather(*(turn(c) for c in convos))
    follow = [[*c, {"role": "assistant", "content": r["choices"][0]["message"]["content"] or "ok"},
               {"role": "user", "content": "And the one after that?"}] for c, r in zip(convos, first, strict=True)]  # fmt: skip
    # a mixed batch: conversations that hit the cache beside one that shares nothing with it
    stranger = [{"role": "user", "content": "A wholly different prompt, with nothing cached before it at all."}]
    return [*first, *await asyncio.gather(*(turn(c) for c in [*follow, stranger]))]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
async def test_cached_prefixes_give_the_same_tokens_and_logprobs(tiny_model_path: Path, dtype: str) -> None:
    results, kept = {}, []
    for mb in (0, 64):
        engine = TransformersEngine(str(tiny_model_path), dtype=dtype, prefix_cache_mb=mb)
        await engine.start()
        try:
            results[mb] = await _two_turns(engine, _conversations(5))
            stats = dict(engine.stats)
            if engine.prefix is not None:
                kept = list(engine.prefix._entries.values())
        finally:
            await engine.stop()
    # a bfloat16 model's float32 cache holds bfloat16 numbers: the entries keep them at the model's precision
    assert kept and all(t.dtype == getattr(torch, dtype) for e in kept for t in (*e.keys, *e.values))
    plain, cached = results[0], results[64]
    for a, b in zip(plain, cached, strict=True):
        ca, cb = a["choices"][0], b["choices"][0]
        assert ca["token_ids"] == cb["token_ids"]
        la = torch.tensor([t["logprob"] for t in ca["logprobs"]["content"]])
        lb = torch.tensor([t["logprob"] for t in cb["logprobs"]["content"]])
        # bfloat16: prefilling the rest after a cached prefix rounds differently from prefilling it all
        assert torch.allclose(la, lb, atol=1e-4 if dtype == "float32" else 0.03), (la, lb)
        assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]
    second_turns = cached[5:10]
    assert all(r["usage"]["prompt_tokens_details"]["cached_tokens"] > MIN_REUSE for r in second_turns)
    assert cached[10]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert all(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for r in plain)
    assert stats["cached_tokens"] > 0 and stats["prefill_tokens"] < sum(r["usage"]["prompt_tokens"] for r in cached)


async def test_reloading_an_adapter_drops_its_cached_prefixes(tiny_model_path: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))  # fmt: skip
    peft.save_pretrained(tmp_path / "lora")
    engine = TransformersEngine(str(tiny_model_path), dtype="float32", prefix_cache_mb=64)
    await engine.start()
    try:
        await engine.load_adapter("a", tmp_path / "lora")
        messages = _conversations(1)[0]
        request = ChatRequest(messages=messages, model="m", adapter="a", sampling=SamplingParams(temperature=0.0, max_tokens=4))  # fmt: skip
        await engine.chat(request)
        assert engine.prefix is not None and len(engine.prefix) == 1
        again = await engine.chat(request)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        await engine.load_adapter("a", tmp_path / "lora")  # new weights under the same name
        assert len(engine.prefix) == 0
        fresh = await engine.chat(request)
        assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        await engine.stop()

