"""`ModelConfig.recompute_mlp`: the same logprobs and LoRA gradients, less kept for backward, gate run twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from art_train.models import load_causal_lm
from art_train.trainer import SharedPrefix, row_logprobs
from art_train.trainer import recompute as recompute_module
from art_train.trainer.recompute import recompute_mlp


def _lora(path: Path, recompute: bool):  # noqa: ANN202
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = load_causal_lm(path, dtype="float32", device="cpu")
    if recompute:
        assert recompute_mlp(base) == base.config.num_hidden_layers
        assert recompute_mlp(base) == 0  # once only
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                           target_modules=["q_proj", "gate_proj", "up_proj", "down_proj"]))


def _step(model, ids: torch.Tensor, k: int) -> tuple[torch.Tensor, dict[str, torch.Tensor], int, int]:  # noqa: ANN001
    """A prefix of k tokens shared, the rest trained: (logp, LoRA grads, bytes kept for backward, gate calls)."""
    causal_lm = model.get_base_model()
    gate = causal_lm.model.layers[0].mlp.gate_proj
    calls = []
    hook = gate.register_forward_hook(lambda *_: calls.append(1))
    kept: dict[int, int] = {}  # activations kept for backward (the weights the head keeps left out)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in weights:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    n = int(ids.shape[0])
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        prefix = SharedPrefix(causal_lm, ids[:k])
        logp, _ = row_logprobs(causal_lm, ids, torch.arange(n), torch.arange(k - 1, n - 1), ids[k:], prefix=prefix)
    (logp * torch.linspace(-1, 1, logp.shape[0])).sum().backward()
    prefix.backward()
    hook.remove()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    return logp.detach(), grads, sum(kept.values()), len(calls)


def test_recompute_mlp_gives_the_same_gradients_and_keeps_less(tiny_model_path: Path) -> None:
    ids = torch.randint(0, 49152, (96,), generator=torch.Generator().manual_seed(4))
    plain_logp, plain_grads, plain_kept, plain_calls = _step(_lora(tiny_model_path, False), ids, 16)
    logp, grads, kept, calls = _step(_lora(tiny_model_path, True), ids, 16)
    assert torch.allclose(logp, plain_logp, atol=1e-6)
    assert grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.allclose(grads[name], grad, atol=1e-6), name
    assert any(g.abs().sum() > 0 for name, g in grads.items() if "gate_proj.lora_B" in name)
    assert plain_calls == 2 and calls == 4  # prefix and rest forward; with recompute again in each backward
    assert kept < 0.8 * plain_kept, (kept, plain_kept)  # gate, up, SiLU and their product are not kept


def test_recompute_mlp_runs_the_plain_forward_without_grad(tiny_model_path: Path) -> None:
    model = _lora(tiny_model_path, True)
    ids = torch.randint(0, 49152, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = model.get_base_model()(input_ids=ids).logits
    reference = _lora(tiny_model_path, False)
    with torch.no_grad():
        assert torch.equal(out, reference.get_base_model()(input_ids=ids).logits)


@pytest.mark.parametrize("recompute", [False, True])
def test_the_trainer_recomputes_when_the_model_config_asks(make_trainer, recompute: bool) -> None:  # noqa: ANN001
    trainer = make_trainer(recompute_mlp=recompute)
    mlps = [m for m in trainer.policy.causal_lm.modules() if hasattr(m, "gate_proj") and hasattr(m, "act_fn")]
    # recompute_mlp: gate and up run again; otherwise only SiLU and the product do (the default)
    forward = recompute_module._forward if recompute else recompute_module._products_forward
    assert mlps and all(m.forward.__func__ is forward for m in mlps)
    # still after the mode changes of a step (transformers re-kernelizes hub-kernel modules on train()/eval(),
    # which would put a decorated MLP class's forward back: none is decorated today, this says if one becomes so)
    with trainer.policy.training():
        assert all(m.forward.__func__ is forward for m in mlps)
    assert all(m.forward.__func__ is forward for m in mlps)


def test_an_mlp_with_another_formula_is_left_as_it_is(tiny_model_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # the same attribute names, another formula (the activation on up): recomputing would change the model
    base = load_causal_lm(tiny_model_path, dtype="float32", device="cpu")
    mlp_type = type(base.model.layers[0].mlp)
    other = type("SwappedMLP", (mlp_type,), {"forward": lambda self, x: self.down_proj(self.gate_proj(x) * self.act_fn(self.up_proj(x)))})
    for layer in base.model.layers:
        layer.mlp.__class__ = other
    assert recompute_mlp(base) == 0
    assert "SwappedMLP does not compute" in caplog.text


def _lora_products(path: Path):  # noqa: ANN202
    from peft import LoraConfig, get_peft_model

    from art_train.trainer.recompute import recompute_mlp_products

    torch.manual_seed(0)
    base = load_causal_lm(path, dtype="float32", device="cpu")
    assert recompute_mlp_products(base) == base.config.num_hidden_layers
    assert recompute_mlp_products(base) == 0 and recompute_mlp(base) == 0  # once only, one way only
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                           target_modules=["q_proj", "gate_proj", "up_proj", "down_proj"]))


def test_mlp_products_recomputed_give_the_same_bits_and_keep_less(tiny_model_path: Path) -> None:
    ids = torch.randint(0, 49152, (96,), generator=torch.Generator().manual_seed(4))
    plain_logp, plain_grads, plain_kept, plain_calls = _step(_lora(tiny_model_path, False), ids, 16)
    model = _lora_products(tiny_model_path)
    logp, grads, kept, calls = _step(model, ids, 16)
    assert torch.equal(logp, plain_logp)
    assert grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.equal(grads[name], grad), name  # the ops autograd runs, on the same values
    assert any(g.abs().sum() > 0 for name, g in grads.items() if "down_proj.lora_A" in name)
    assert calls == plain_calls == 2  # no matmul again: gate runs once a forward
    config = model.get_base_model().config  # per layer and token of the 96, SiLU(gate) and the product less
    less = 2 * config.num_hidden_layers * 96 * config.intermediate_size * 4
    assert plain_kept - kept == less, (plain_kept, kept)  # down_proj's hooks pass the rest to the counting hook


def assert_same_bits_without_grad_and_under_autocast(model, reference) -> None:  # noqa: ANN001
    """`model` gives `reference`'s logits without grad, and its LoRA gradients under bfloat16 autocast, bit for bit."""
    ids = torch.randint(0, 49152, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.equal(model.get_base_model()(input_ids=ids).logits,
                           reference.get_base_model()(input_ids=ids).logits)
    grads = []
    for m in (model, reference):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            m.get_base_model()(input_ids=ids).logits.float().square().mean().backward()
        grads.append({n: p.grad for n, p in m.named_parameters() if p.requires_grad})
    for name, grad in grads[1].items():
        assert torch.equal(grads[0][name], grad), name


def test_mlp_products_under_autocast_and_without_grad(tiny_model_path: Path) -> None:
    assert_same_bits_without_grad_and_under_autocast(_lora_products(tiny_model_path), _lora(tiny_model_path, False))
