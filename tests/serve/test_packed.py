"""bfloat16 linears on pre-packed oneDNN weights (`art_train.engines.packed`) and the engine that uses them.

Packing needs a torch with oneDNN whose packed product equals `F.linear`'s on this CPU; where it does not
(`packable` False), the tests that need it skip and `test_an_engine_that_cannot_pack_serves_unpacked`
covers the path every such machine takes.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import pytest
import torch

from art_train.engines import packed
from art_train.engines.base import ChatRequest, SamplingParams
from art_train.engines.transformers.engine import TransformersEngine
from art_train.lora import BaseWeights, LoraPair, probe_logprobs_batch
from art_train.models import load_causal_lm


def _model(path: Path) -> torch.nn.Module:
    model = load_causal_lm(path, dtype="bfloat16")
    model.requires_grad_(False)
    return model


def _lora(model: torch.nn.Module, names: list[str], seed: int) -> dict[str, LoraPair]:
    gen = torch.Generator().manual_seed(seed)
    modules = dict(model.named_modules())
    out = {}
    for name in names:
        module = modules[name]
        out[name] = LoraPair(torch.randn(module.out_features, 4, generator=gen) * 0.05,
                             torch.randn(4, module.in_features, generator=gen) * 0.05, 2.0)
    return out


@pytest.fixture
def packed_or_skip(tiny_model_path: Path) -> Path:
    if not packed.packable(_model(tiny_model_path)):
        pytest.skip("this CPU's oneDNN does not pack bfloat16 linears with F.linear's results")
    return tiny_model_path


def test_packed_model_gives_the_plain_models_logits_bit_for_bit(packed_or_skip: Path) -> None:
    plain = _model(packed_or_skip)
    model = copy.deepcopy(plain)
    n = packed.pack(model)
    assert n == sum(isinstance(m, torch.nn.Linear) for m in plain.modules()) and n > 0
    ids = torch.randint(0, 1000, (3, 17), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for batch in (ids, ids[:, :1], ids[:1, :5]):  # a prefill, a decode step, one row
            assert torch.equal(model(input_ids=batch).logits, plain(input_ids=batch).logits)


def test_a_merged_copy_shares_the_base_and_frees_what_it_packed(packed_or_skip: Path) -> None:
    base, reference = _model(packed_or_skip), _model(packed_or_skip)
    plain = {n: m.weight.detach().clone() for n, m in base.named_modules() if isinstance(m, torch.nn.Linear)}
    packed.pack(base, free=True)  # as the engine does: only packed weights kept, originals read back from them
    head = base.get_output_embeddings()
    for name, module in base.named_modules():
        if isinstance(module, torch.nn.Linear):
            assert module.weight.numel() == 0 or (module is head and base.config.tie_word_embeddings)
            assert torch.equal(packed.dense_weight(module), plain[name])
    before = {k: v.clone() for k, v in base.state_dict().items()}
    base_modules = dict(base.named_modules())
    weights = BaseWeights(base, originals=lambda name: packed.dense_weight(base_modules[name]))
    names = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"]
    lora = _lora(base, names, 0)

    target = packed.merge(weights, base, lora)
    BaseWeights(reference).apply(reference, lora)  # the plain merge, in place

    modules = dict(target.named_modules())
    for name in names:  # merged and packed; the plain copy is gone
        assert modules[name].weight.numel() == 0
        assert modules[name].art_packed is not base_modules[name].art_packed
    other = "model.layers.0.mlp.up_proj"  # untouched: the base's own tensors, not a copy
    assert modules[other].weight is base_modules[other].weight
    assert modules[other].art_packed is base_modules[other].art_packed
    assert all(torch.equal(v, before[k]) for k, v in base.state_dict().items())  # the base is not written
    ids = torch.randint(0, 1000, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        assert torch.equal(target(input_ids=ids).logits, reference(input_ids=ids).logits)

    # reused for another adapter on other modules: the earlier ones go back to the base's values
    lora2 = _lora(base, ["model.layers.1.self_attn.v_proj"], 1)
    assert packed.merge(weights, base, lora2, target) is target
    reference = _model(packed_or_skip)
    BaseWeights(reference).apply(reference, lora2)
    with torch.inference_mode():
        assert torch.equal(target(input_ids=ids).logits, reference(input_ids=ids).logits)


async def test_packed_engine_serves_adapters_as_the_trainer_reference_computes(tiny_model_path: Path) -> None:
    plain = _model(tiny_model_path)
    if not packed.packable(plain):
        pytest.skip("this CPU's oneDNN does not pack bfloat16 linears with F.linear's results")
    engine = TransformersEngine(tiny_model_path, dtype="bfloat16", max_models=2, prefix_cache_mb=0)
    await engine.start()
    try:
        assert engine.packed and engine._thread is not None and engine._thread.name == "art-engine"
        names = [n for n, m in plain.named_modules() if isinstance(m, torch.nn.Linear) and "layers" in n]
        seqs = [[1, 5, 9, 200, 7, 3], [1, 44, 2]]
        for step in range(3):  # more adapters than copies: an idle copy is re-merged
            lora = _lora(plain, names, step)
            await engine.load_adapter_pairs(f"a@{step}", lora)
            served = await engine.sequences_logprobs(seqs, f"a@{step}")
            reference = copy.deepcopy(plain)
            BaseWeights(reference).apply(reference, lora)  # what the trainer's weight-sync reference does
            assert served == probe_logprobs_batch(reference, seqs)
        reply = await engine.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], model="a@2",
                                              sampling=SamplingParams(max_tokens=3, temperature=0)))
        assert reply["usage"]["completion_tokens"] == 3
        assert await engine.sequences_logprobs(seqs, None) == probe_logprobs_batch(plain, seqs)
    finally:
        await engine.stop()


async def test_an_engine_that_cannot_pack_serves_unpacked(tiny_model_path: Path, monkeypatch) -> None:  # noqa: ANN001
    def fail(*args: object) -> None:
        raise RuntimeError("no oneDNN here")

    monkeypatch.setattr(packed, "_reorder", fail)
    engine = TransformersEngine(tiny_model_path, dtype="bfloat16", prefix_cache_mb=0)
    await engine.start()
    try:
        assert not engine.packed
        assert not any(isinstance(m, packed.PackedLinear) for m in engine.model.modules())
        lora = _lora(engine.model, ["model.layers.0.self_attn.q_proj"], 0)
        await engine.load_adapter_pairs("a", lora)
        reference = _model(tiny_model_path)
        BaseWeights(reference).apply(reference, lora)
        assert await engine.sequences_logprobs([[1, 5, 9, 200]], "a") == probe_logprobs_batch(reference, [[1, 5, 9, 200]])
    finally:
        await engine.stop()


async def test_engine_loads_on_its_own_thread_and_reports_a_failed_load(tmp_path: Path) -> None:
    engine = TransformersEngine(tmp_path / "no-such-model", dtype="float32")
    before = set(threading.enumerate())  # other tests' engines may still run in this process
    with pytest.raises(Exception) as info:
        await engine.start()
    assert "no-such-model" in str(info.value)
    assert engine._thread is None
    assert not [t for t in threading.enumerate() if t not in before and t.name == "art-engine"]  # it ended
