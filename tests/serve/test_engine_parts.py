"""The embedded engine's inner parts: the sampler, the growing KV cache and the LoRA merge."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from art_train.engines.base import SamplingParams
from art_train.engines.kv import SPARE, GrowingLayer, drop_leading, grow_in_place, select_rows
from art_train.engines.transformers.scheduler import BLOCK, Seq, choose, inverse_cdf
from art_train.lora import BaseWeights, load_lora


def _seqs(n: int, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None) -> list[Seq]:
    params = SamplingParams(temperature=temperature, top_p=top_p)
    out = []
    for i in range(n):
        gen = torch.Generator().manual_seed(seed + i) if seed is not None else None
        out.append(Seq(prompt=[1], params=params, adapter=None, emit=lambda s, f: None, generator=gen))
    return out


def test_sampler_draws_from_the_distribution() -> None:
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.25, 0.125, 0.125, 0.0])
    rows = 40_000
    logits = probs.clamp(min=1e-30).log().expand(rows, -1).contiguous()
    logits[:, probs == 0] = float("-inf")
    chosen = choose(logits, _seqs(rows))
    freq = torch.bincount(chosen, minlength=6).double() / rows
    assert freq[1] == 0 and freq[5] == 0  # a token of probability 0 is never drawn
    assert torch.allclose(freq, probs.double(), atol=0.01), freq


def test_sampler_temperature_top_p_greedy_and_seeds() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(20_000, -1).contiguous()
    cold = torch.bincount(choose(logits, _seqs(20_000, temperature=0.5)), minlength=4).double() / 20_000
    warm = torch.bincount(choose(logits, _seqs(20_000, temperature=1.0)), minlength=4).double() / 20_000
    assert cold[0] > warm[0] + 0.1  # a lower temperature sharpens the distribution
    assert torch.allclose(cold, torch.softmax(logits[0] / 0.5, -1).double(), atol=0.015)
    nucleus = choose(logits, _seqs(20_000, top_p=0.7))
    assert set(nucleus.tolist()) == {0, 1}  # p = 0.64, 0.24, ...: the top two cover 0.7
    assert choose(logits[:5], _seqs(5, temperature=0.0)).tolist() == [0] * 5
    first = choose(logits[:8], _seqs(8, seed=3)).tolist()
    assert first == choose(logits[:8], _seqs(8, seed=3)).tolist()


def test_inverse_cdf_in_blocks_picks_what_one_running_sum_picks() -> None:
    gen = torch.Generator().manual_seed(0)
    vocab = 3 * BLOCK + 77  # not a whole number of blocks
    probs = torch.rand(64, vocab, generator=gen) ** 8  # peaked, with many tiny entries
    probs[:, BLOCK:2 * BLOCK] = 0  # a whole block of probability 0
    probs[:, -100:] = 0  # a zero tail, padding after it
    probs[::2, : BLOCK // 2] = 0
    probs = probs / probs.sum(-1, keepdim=True)
    draws = torch.rand(64, 1, dtype=torch.float64, generator=gen)
    draws[:4, 0] = torch.tensor([0.0, 1 - 2**-53, 0.5, 1e-12])  # the ends of the interval
    full = probs.to(torch.float64).cumsum(-1)
    expected = torch.searchsorted(full, draws * full[:, -1:], right=True)[:, 0]
    last_nonzero = vocab - 1 - (probs.flip(-1) > 0).long().argmax(-1)
    expected = torch.minimum(expected, last_nonzero)
    chosen = inverse_cdf(probs, draws)
    assert bool((probs.gather(1, chosen[:, None]) > 0).all())  # never a token of probability 0
    assert chosen.tolist() == expected.tolist()


def test_inverse_cdf_never_picks_a_zero_tail_at_a_draw_of_one() -> None:
    probs = torch.zeros(2, 2 * BLOCK + 5)
    probs[0, 3], probs[0, 10] = 0.25, 0.75
    probs[1, BLOCK + 1] = 1.0
    chosen = inverse_cdf(probs, torch.ones(2, 1, dtype=torch.float64))  # the total itself: past every interval
    assert chosen.tolist() == [10, BLOCK + 1]


def test_growing_cache_matches_the_dynamic_cache(tiny_model_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    ids = torch.randint(5, 200, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding
    mask[2, :7] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    steps = SPARE + 5  # crosses a buffer refill
    with torch.inference_mode():
        runs = []
        for grow in (False, True):
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            cache = out.past_key_values
            if grow:
                grow_in_place(cache)
                assert all(isinstance(layer, GrowingLayer) for layer in cache.layers)
            m, p, last, logits = mask, mask.sum(1), out.logits[:, -1].argmax(-1), []
            for _ in range(steps):
                m = torch.cat([m, torch.ones(3, 1, dtype=m.dtype)], 1)
                out = model(input_ids=last[:, None], attention_mask=m, position_ids=p[:, None], cache=cache,
                            use_cache=True)
                logits.append(out.logits[:, -1])
                p, last = p + 1, out.logits[:, -1].argmax(-1)
            runs.append((torch.stack(logits), cache))
    (a, dyn), (b, grown) = runs
    assert torch.allclose(a, b, atol=1e-5)
    assert grown.get_seq_length() == dyn.get_seq_length() == 12 + steps
    # rows leave and all-padding columns drop without changing what the rest attend to
    select_rows(grown, torch.tensor([0, 2]))
    drop_leading(grown, 3)
    for g, d in zip(grown.layers, dyn.layers, strict=True):
        assert torch.equal(g.keys, d.keys[[0, 2], :, 3:]) and torch.equal(g.values, d.values[[0, 2], :, 3:])


def test_merged_adapter_equals_peft_merge(tiny_model_path: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]))
    for name, param in peft.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.05)
    peft.save_pretrained(tmp_path / "adapter")
    expected = {n: p.detach().clone() for n, p in peft.merge_and_unload().state_dict().items()}

    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    original = {n: p.detach().clone() for n, p in fresh.state_dict().items()}
    weights = BaseWeights(fresh)
    weights.apply(fresh, load_lora(tmp_path / "adapter"))
    for name, tensor in fresh.state_dict().items():
        assert torch.allclose(tensor, expected[name], atol=1e-6), name
    weights.apply(fresh, None)  # back to the bare base, exactly
    assert all(torch.equal(t, original[n]) for n, t in fresh.state_dict().items())
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        load_lora(tmp_path)

    # an engine's base is merged into copies only: its own weights are the originals, nothing is cloned
    modules = dict(fresh.named_modules())
    aliased = BaseWeights(fresh, originals=lambda name: modules[name].weight.detach())
    copy = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    aliased.apply(copy, load_lora(tmp_path / "adapter"))
    assert all(torch.allclose(t, expected[n], atol=1e-6) for n, t in copy.state_dict().items())
    assert aliased.saved == {} and aliased.touched == weights.touched
    aliased.apply(copy, None)
    assert all(torch.equal(t, original[n]) for n, t in copy.state_dict().items())
    assert all(torch.equal(t, original[n]) for n, t in fresh.state_dict().items())
    with pytest.raises(ValueError, match="merge into a copy"):
        aliased.apply(fresh, None)
    with pytest.raises(ValueError, match="this model does not have"):
        aliased.apply(copy, {"model.layers.9.nothing": next(iter(load_lora(tmp_path / "adapter").values()))})


@pytest.mark.heavy
def test_float32_cache_attention_is_registered_only_when_used() -> None:
    # importing the engines must not write into transformers' global registries
    code = (
        "from types import SimpleNamespace\n"
        "from transformers import AttentionInterface\n"
        "from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS as MASKS\n"
        "import art_train.engines.attention as a, art_train.engines.transformers\n"
        "assert a.NAME not in AttentionInterface._global_mapping and a.NAME not in MASKS._global_mapping\n"
        "m = SimpleNamespace(config=SimpleNamespace(_attn_implementation='sdpa'))\n"
        "a.use_float32_cache_attention(m)\n"
        "assert a.NAME in AttentionInterface._global_mapping and a.NAME in MASKS._global_mapping\n"
        "assert m.config._attn_implementation == a.NAME\n"
    )
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_prefill_hands_the_head_a_contiguous_input(tiny_model_path: Path) -> None:
    # a prefill keeps each row's last position, a strided slice; given one, torch's CPU matmul broadcasts
    # the head's weight to every row (3.4 GB for 64 rows of smollm2-135m in bfloat16): the engine copies first
    import asyncio

    from art_train.engines.base import ChatRequest
    from art_train.engines.transformers import TransformersEngine

    async def run() -> list[tuple[int, bool]]:
        engine = TransformersEngine(tiny_model_path, dtype="bfloat16")
        await engine.start()
        seen: list[tuple[int, bool]] = []
        engine.model.get_output_embeddings().register_forward_pre_hook(
            lambda m, args: seen.append((args[0].shape[0], args[0].is_contiguous())))
        greedy = SamplingParams(temperature=0.0, max_tokens=3)
        prompts = [f"Count {'to ten ' * i}now." for i in range(1, 6)]
        try:
            await asyncio.gather(*[engine.chat(ChatRequest(messages=[{"role": "user", "content": p}], model="m",
                                                           sampling=greedy)) for p in prompts])
        finally:
            await engine.stop()
        return seen

    seen = asyncio.run(run())
    assert any(rows > 1 for rows, _ in seen), seen  # a batched prefill happened
    assert all(contiguous for _, contiguous in seen), seen
