"""The trainer's split attention for rows after a shared prompt (art_train/trainer/attention.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from art_train.models import load_causal_lm
from art_train.trainer import SharedPrefix, attention, row_logprobs, rows_logprobs
from art_train.trainer.attention import prompt_length, use_split_attention


def _mask(batch: int, q: int, p: int) -> torch.Tensor:
    keys = torch.arange(p + q)[None, :] <= torch.arange(q)[:, None] + p
    return keys[None, None].expand(batch, 1, q, p + q)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("batch", "q", "p"), [(1, 70, 30), (2, 33, 90), (1, 2, 5)])
def test_split_attention_equals_one_masked_call(dtype: torch.dtype, batch: int, q: int, p: int) -> None:
    gen = torch.Generator().manual_seed(q + p)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    query = torch.randn(batch, 6, q, 16, generator=gen).to(dtype).requires_grad_()
    key = torch.randn(batch, 2, p + q, 16, generator=gen).to(dtype).requires_grad_()
    value = torch.randn(batch, 2, p + q, 16, generator=gen).to(dtype).requires_grad_()
    grad = torch.randn(batch, q, 6, 16, generator=gen).to(dtype)
    mask = _mask(batch, q, p)
    results = []
    for fn in (sdpa_attention_forward, attention._attention):
        for t in (query, key, value):
            t.grad = None
        out, _ = fn(module, query, key, value, mask, dropout=0.0, scaling=0.25)
        out.backward(grad)
        results.append([out.detach(), query.grad, key.grad, value.grad])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for ours, theirs in zip(*reversed(results), strict=True):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        assert torch.allclose(ours.float(), theirs.float(), atol=tol, rtol=tol), (ours - theirs).abs().max()


def test_split_attention_follows_autocast() -> None:
    gen = torch.Generator().manual_seed(0)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    query, key, value = torch.randn(1, 6, 40, 16, generator=gen), *torch.randn(2, 1, 2, 60, 16, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theirs, _ = sdpa_attention_forward(module, query, key, value, _mask(1, 40, 20), scaling=0.25)
        ours, _ = attention._attention(module, query, key, value, _mask(1, 40, 20), scaling=0.25)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    assert torch.allclose(ours.float(), theirs.float(), atol=2e-2)


def test_prompt_length_takes_only_the_causal_pattern_after_a_prompt() -> None:
    assert prompt_length(_mask(2, 5, 7)) == 7
    assert prompt_length(_mask(1, 5, 0)) == 0  # no prompt: plain causal, left to SDPA's is_causal
    other = _mask(1, 5, 7).clone()
    other[0, 0, 3, 0] = False  # a block of another sequence (packed rows), or padding
    assert prompt_length(other) == 0
    assert prompt_length(torch.where(_mask(1, 5, 7), 0.0, float("-inf"))) == 0  # float masks go to SDPA
    rows = torch.cat([_mask(1, 5, 7), _mask(1, 5, 7).clone()])
    rows[1, 0, 4, 11] = False
    assert prompt_length(rows) == 0  # every row must follow the pattern


def _lora(path: Path, split: bool):  # noqa: ANN202
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = load_causal_lm(path, dtype="float32", device="cpu")
    assert use_split_attention(base) is True
    if not split:
        base.config._attn_implementation = "sdpa"
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                           target_modules=["q_proj", "k_proj", "v_proj", "down_proj"]))


def test_rows_after_a_shared_prompt_train_as_with_sdpa(tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = torch.randint(0, 49152, (2, 80), generator=torch.Generator().manual_seed(4))
    k = 24
    calls: list[int] = []
    apply = attention._SplitAttention.apply
    monkeypatch.setattr(attention._SplitAttention, "apply", lambda *a: calls.append(1) or apply(*a))
    results, kept = [], []
    for split in (False, True):
        model = _lora(tiny_model_path, split)
        causal_lm = model.get_base_model()
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        storages: dict[int, int] = {}  # what the rows keep for backward, by storage (weights left out)

        def keep(t: torch.Tensor, weights: set[int] = weights, storages: dict[int, int] = storages) -> torch.Tensor:
            if t.untyped_storage().data_ptr() not in weights:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        prefix = SharedPrefix(causal_lm, ids[0, :k])
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            one, _ = row_logprobs(causal_lm, ids[0], torch.arange(80), torch.arange(k - 1, 79), ids[0, k:],
                                  prefix=prefix)
            row2 = torch.cat([ids[0, :k], ids[1, : 50 - k]])
            two = rows_logprobs(causal_lm, [(ids[0], torch.arange(80), torch.arange(k - 1, 79), ids[0, k:]),
                                            (row2, torch.arange(50), torch.arange(k - 1, 49), row2[k:])],
                                prefix=prefix)
        kept.append(sum(storages.values()))
        logp = torch.cat([one, two[0][0], two[1][0]])
        (logp * torch.linspace(-1, 1, logp.shape[0])).sum().backward()
        prefix.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
        results.append((logp.detach(), grads))
        assert len(calls) == (2 * causal_lm.config.num_hidden_layers if split else 0)
    (plain_logp, plain_grads), (logp, grads) = results
    # neither repeated keys and values (grouped heads go to the kernel as they are) nor a second copy of the output
    assert kept[1] < 0.9 * kept[0], kept
    assert torch.allclose(logp, plain_logp, atol=1e-5)
    for name, grad in plain_grads.items():
        assert grad.abs().sum() > 0, name
        assert torch.allclose(grads[name], grad, atol=1e-5, rtol=1e-4), name


def test_a_model_without_sdpa_is_left_as_it_is() -> None:
    model = SimpleNamespace(config=SimpleNamespace(_attn_implementation="eager"))
    assert use_split_attention(model) is False
    assert model.config._attn_implementation == "eager"


def test_importing_the_trainer_leaves_transformers_unimported() -> None:
    import subprocess
    import sys

    code = "import sys, art_train.trainer; assert 'transformers' not in sys.modules, 'transformers imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
