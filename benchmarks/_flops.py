"""A step's FLOPs as run, counted by torch's FlopCounterMode, CPU flash attention included.

torch counts matmuls (`mm`, `addmm`, `bmm`: linear layers, LoRA, the output layer, their backward and any
recomputation) but has no formula for the CPU flash attention kernels, so they are added here: a call
counts 2 FLOPs per multiply-add of its score (QK^T) and output (PV) products, over the query/key pairs
the kernel computes (all of them with a mask, the lower triangle with `is_causal`); its backward counts
twice that, torch's convention for attention backward (dV, dP, dQ, dK). Element-wise work is not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["count_flops"]


def _pairs(q_shape: Any, k_shape: Any, causal: bool) -> int:
    """Query/key pairs one (batch, head) computes: all, or with `is_causal` (top-left aligned) the triangle."""
    sq, sk = q_shape[-2], k_shape[-2]
    if not causal:
        return int(sq * sk)
    m = min(sq, sk)  # query i sees min(i + 1, sk) keys: the triangle over the first m, then whole rows
    return int(m * (m + 1) // 2 + (sq - m) * sk)


def _attention_forward(query: Any, key: Any, value: Any, dropout_p: float = 0.0, is_causal: bool = False,
                       *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    b, h, _, d = query
    return 4 * b * h * d * _pairs(query, key, is_causal)


def _attention_backward(grad_out: Any, query: Any, key: Any, value: Any, out: Any, logsumexp: Any,
                        dropout_p: float = 0.0, is_causal: bool = False, *args: Any, out_shape: Any = None,
                        **kwargs: Any) -> int:
    return 2 * _attention_forward(query, key, value, dropout_p, is_causal)


def count_flops(fn: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """Run `fn` under a FlopCounterMode; returns its result and FLOPs per op name, with "total"."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    mode = FlopCounterMode(display=False, custom_mapping={
        aten._scaled_dot_product_flash_attention_for_cpu: _attention_forward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward,
    })
    with mode:
        result = fn()
    per_op = {str(op).removeprefix("aten."): int(n) for op, n in mode.get_flop_counts()["Global"].items()}
    return result, {**per_op, "total": int(mode.get_total_flops())}
