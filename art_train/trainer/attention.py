"""Attention for rows after a shared prompt, in two parts (CPU, training).

A row after a shared prompt of p tokens attends to the prompt's cached keys and values and causally to
its own q tokens, so transformers hands SDPA a [q, p + q] mask, and PyTorch's CPU flash kernel computes
every block of it, the masked half of the q x q square too. Here the two parts run apart: the prompt
without a mask, the row's own tokens with ``is_causal`` (which skips the blocks above the diagonal).
Their outputs merge by their log-sum-exps; backward runs the kernel's own backward on each part with the
merged output and log-sum-exp, which is the whole attention's gradient (each part's probabilities are
then the whole softmax's). Same values as one masked call to within rounding (`tests/train/test_attention.py`).
It also keeps less for backward: grouped keys and values go to the kernels as they are (not repeated for
each query head), and the output is laid out as o_proj takes it, so one copy is kept, not two. On the
agent-shaped step of `benchmarks/train_step.py` under tcmalloc: 0.88x the peak RSS at 1.08x the speed.

The split applies only where the mask is exactly that pattern (checked once per mask tensor: transformers
hands every layer the same one), on CPU, without dropout or extra arguments (softcap, sinks, sliding
windows); anything else goes to transformers' own SDPA attention. transformers is imported only when a
model is switched (importing the trainer does not import it).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ..models import use_sdpa_variant

__all__ = ["NAME", "use_split_attention"]

NAME = "art_split_sdpa"
_ATEN = torch.ops.aten
_last: tuple[Any, int] | None = None  # (weakref to the last mask checked, its prompt length; 0: not the pattern)


class _SplitAttention(torch.autograd.Function):
    """Attention of q [B, H, q, D] over a prompt (kp, vp, no mask) and its own keys (ks, vs, causal); keys and
    values may have fewer heads than q (grouped-query attention), which the CPU kernels take as they are."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, kp: torch.Tensor, vp: torch.Tensor, ks: torch.Tensor,  # noqa: ANN205
                vs: torch.Tensor, scale: float | None):
        o1, l1 = _ATEN._scaled_dot_product_flash_attention_for_cpu(q, kp, vp, 0.0, False, scale=scale)
        o2, l2 = _ATEN._scaled_dot_product_flash_attention_for_cpu(q, ks, vs, 0.0, True, scale=scale)
        lse = torch.logaddexp(l1, l2)
        # laid out [B, q, H, D], as o_proj takes it: the tensor kept here is the one o_proj keeps, not a copy
        out = q.new_empty(q.shape[0], q.shape[2], q.shape[1], q.shape[3]).transpose(1, 2)
        out.copy_(o1 * torch.exp(l1 - lse)[..., None] + o2 * torch.exp(l2 - lse)[..., None])
        ctx.save_for_backward(q, kp, vp, ks, vs, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):  # noqa: ANN205
        q, kp, vp, ks, vs, out, lse = ctx.saved_tensors
        grad = grad.contiguous()
        back = _ATEN._scaled_dot_product_flash_attention_for_cpu_backward
        dq1, dkp, dvp = back(grad, q, kp, vp, out, lse, 0.0, False, scale=ctx.scale)
        dq2, dks, dvs = back(grad, q, ks, vs, out, lse, 0.0, True, scale=ctx.scale)
        return dq1 + dq2, dkp, dvp, dks, dvs, None


def prompt_length(mask: torch.Tensor) -> int:
    """p where `mask` [B, 1, q, p + q] (bool) lets query i see keys 0..p + i, every row alike; else 0."""
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1:
        return 0
    q, keys = mask.shape[-2:]
    p = keys - q
    if p <= 0:
        return 0
    expected = torch.arange(keys, device=mask.device)[None, :] <= torch.arange(q, device=mask.device)[:, None] + p
    return p if bool((mask == expected).all()) else 0


def _cached_prompt_length(mask: torch.Tensor) -> int:
    global _last
    last = _last
    if last is not None and last[0]() is mask:
        return last[1]
    p = prompt_length(mask)
    _last = (weakref.ref(mask), p)
    return p


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, Any]:
    plain = not any(kwargs.get(k) is not None for k in ("softcap", "s_aux", "sliding_window", "position_bias"))
    p = 0
    if plain and dropout == 0.0 and attention_mask is not None and query.device.type == "cpu" and query.shape[2] > 1:
        p = _cached_prompt_length(attention_mask)
    if not p:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    # SDPA runs in autocast's dtype (it is on CPU autocast's list; the kernels called here are not)
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else query.dtype
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)  # grouped heads as they are
    out = _SplitAttention.apply(query, key[:, :, :p], value[:, :, :p], key[:, :, p:], value[:, :, p:], scaling)
    return out.transpose(1, 2).contiguous(), None  # already contiguous: no copy


def use_split_attention(model: Any) -> bool:
    """Switch `model` to the attention above where it runs SDPA (returns whether it did); registers it first."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    use_sdpa_variant(model, NAME, _attention)
    return True
