"""The trainer's half-precision reference merges from the trainer's own base weights, cast, and computes
exactly what it computed from clones of its own."""

from __future__ import annotations

from pathlib import Path

import torch

from art_train.models import load_causal_lm
from art_train.trainer.probe import HalfPrecisionReference


def _peft(path: Path):  # noqa: ANN202
    from peft import LoraConfig, get_peft_model

    model = load_causal_lm(path, dtype="float32", device="cpu")
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    gen = torch.Generator().manual_seed(0)
    for name, param in peft.named_parameters():
        if "lora_B" in name:
            param.data.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    return peft


def test_reference_from_the_trainer_weights_equals_one_from_clones(tiny_model_path: Path) -> None:
    peft = _peft(tiny_model_path)
    seqs = [[1, 5, 9, 200, 7, 3], [1, 44, 2], [3]]
    shared, cloned = HalfPrecisionReference(tiny_model_path, "cpu"), HalfPrecisionReference(tiny_model_path, "cpu")
    got = shared.logprobs(seqs, "bfloat16", peft, None)
    assert got == cloned.logprobs(seqs, "bfloat16", peft, None, whole=False)
    assert got[2] == [] and len(got[0]) == 5
    assert shared._loaded is not None and shared._loaded[2].saved == {}  # nothing cloned
    assert cloned._loaded is not None and len(cloned._loaded[2].saved) == 6  # 2 layers x 3 targets

    # a second adapter merged afresh from the same originals, and the bare base back
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_A" in name:
                param.mul_(-2)
    again = shared.logprobs(seqs, "bfloat16", peft, None)
    assert again != got and again == cloned.logprobs(seqs, "bfloat16", peft, None, whole=False)
    # the trainer's float32 base is untouched by the merges
    base = dict(peft.get_base_model().named_modules())["model.layers.0.self_attn.q_proj"].get_base_layer()
    assert base.weight.dtype == torch.float32
    fresh = load_causal_lm(tiny_model_path, dtype="float32", device="cpu")
    assert torch.equal(base.weight, fresh.model.layers[0].self_attn.q_proj.weight)


def test_reference_follows_a_new_trainer_model(tiny_model_path: Path) -> None:
    peft = _peft(tiny_model_path)
    seqs = [[1, 5, 9, 200, 7, 3]]
    shared = HalfPrecisionReference(tiny_model_path, "cpu")
    shared.logprobs(seqs, "bfloat16", peft, None)
    modules = shared._trainer
    shared.logprobs(seqs, "bfloat16", peft, None)
    assert shared._trainer is modules  # the same trainer model: its modules are not listed again

    other = _peft(tiny_model_path)  # a reloaded base: a new model, its weights the originals from now on
    with torch.no_grad():
        for name, param in other.named_parameters():
            if "lora_B" in name:
                param.mul_(3)
    got = shared.logprobs(seqs, "bfloat16", other, None)
    assert shared._trainer[""] is other.get_base_model()
    assert got == HalfPrecisionReference(tiny_model_path, "cpu").logprobs(seqs, "bfloat16", other, None, whole=False)
