"""`rebuild_norm_outputs`: the RMSNorms' outputs are not kept for backward, and the gradients are the same bits."""

from __future__ import annotations

import weakref
from pathlib import Path

import pytest
import torch

from art_train.models import load_causal_lm
from art_train.trainer import SharedPrefix, row_logprobs
from art_train.trainer.norms import rebuild_norm_outputs
from art_train.trainer.recompute import recompute_mlp_products
from tests.train.test_recompute import assert_same_bits_without_grad_and_under_autocast

_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _lora(path: Path, rebuild: bool, gemma_norms: bool = False):  # noqa: ANN202
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = load_causal_lm(path, dtype="float32", device="cpu")
    if gemma_norms:  # another formula, x / rms(x) * (1 + weight): the norm itself runs again, whatever it computes
        norm_type = type(base.model.layers[0].input_layernorm)
        gemma = type("GemmaLikeNorm", (norm_type,), {"forward": lambda self, x: norm_type.forward(self, x) / self.weight
                                                     * (1 + self.weight)})
        for layer in base.model.layers:
            layer.input_layernorm.__class__ = layer.post_attention_layernorm.__class__ = gemma
    recompute_mlp_products(base)
    if rebuild:
        assert rebuild_norm_outputs(base) == base.config.num_hidden_layers
        assert rebuild_norm_outputs(base) == 0  # once only
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, target_modules=_TARGETS))


def _step(model, ids: torch.Tensor, k: int):  # noqa: ANN001, ANN202
    """A prefix of k tokens shared, the rest trained: (logp, LoRA grads, bytes of each save, norm outputs' saves)."""
    causal_lm = model.get_base_model()
    outputs: dict[int, weakref.ref] = {}  # the norms' outputs by storage (an address counts while its output lives)
    handles = [m.register_forward_hook(lambda _m, _i, out: outputs.update({out.untyped_storage().data_ptr(): weakref.ref(out)}))
               for layer in causal_lm.model.layers for m in (layer.input_layernorm, layer.post_attention_layernorm)]
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saves: list[tuple[bool, int]] = []  # (a norm's output, bytes)

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            ref = outputs.get(ptr)
            saves.append((ref is not None and ref() is not None, t.untyped_storage().nbytes()))
        return t

    n = int(ids.shape[0])
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        prefix = SharedPrefix(causal_lm, ids[:k])
        logp, _ = row_logprobs(causal_lm, ids, torch.arange(n), torch.arange(k - 1, n - 1), ids[k:], prefix=prefix)
    of_norms = sum(size for norm, size in saves if norm)
    (logp * torch.linspace(-1, 1, logp.shape[0])).sum().backward()
    prefix.backward()
    for handle in handles:
        handle.remove()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    return logp.detach(), grads, sum(size for _, size in saves), of_norms


@pytest.mark.parametrize("gemma_norms", [False, True])
def test_norm_outputs_rebuilt_give_the_same_bits_and_are_not_kept(tiny_model_path: Path, gemma_norms: bool) -> None:
    ids = torch.randint(0, 49152, (96,), generator=torch.Generator().manual_seed(4))
    plain_logp, plain_grads, plain_kept, plain_norms = _step(_lora(tiny_model_path, False, gemma_norms), ids, 16)
    logp, grads, kept, norms = _step(_lora(tiny_model_path, True, gemma_norms), ids, 16)
    assert torch.equal(logp, plain_logp)
    assert grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.equal(grads[name], grad), name  # the same ops on the same values
    assert any(g.abs().sum() > 0 for name, g in grads.items() if "q_proj.lora_A" in name)
    hidden = 64 * 4  # the tiny model's hidden size, in float32 bytes
    assert plain_norms >= 2 * 2 * (96 - 16) * hidden  # each layer's two norms, kept by their LoRA readers
    assert norms == 0 and plain_kept - kept == plain_norms  # nothing else changes, and the rest is still counted


def test_without_grad_and_under_autocast(tiny_model_path: Path) -> None:
    assert_same_bits_without_grad_and_under_autocast(_lora(tiny_model_path, True), _lora(tiny_model_path, False))


def test_the_notes_hold_when_the_model_changes_mode(tiny_model_path: Path) -> None:
    # transformers may give each norm a new `forward` (a hub kernel's, or the class's again) on train()/eval()
    model = _lora(tiny_model_path, True)
    model.eval()
    model.train()
    ids = torch.randint(0, 49152, (96,), generator=torch.Generator().manual_seed(4))
    _, _, _, norms = _step(model, ids, 16)
    assert norms == 0


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_trainer_rebuilds_norm_outputs_unless_it_checkpoints_layers(make_trainer, checkpointing: bool) -> None:  # noqa: ANN001
    trainer = make_trainer(gradient_checkpointing=checkpointing)
    layers = [m for m in trainer.policy.causal_lm.modules() if hasattr(m, "post_attention_layernorm")]
    assert layers and all(hasattr(layer, "_art_norms") != checkpointing for layer in layers)
