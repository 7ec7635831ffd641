"""benchmarks/_flops.py: the FLOPs it counts for CPU flash attention, forward and backward, and for matmuls."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _flops import count_flops  # noqa: E402


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, mask: torch.Tensor | None = None):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask)


def test_attention_forward_counts_the_pairs_the_kernel_computes() -> None:
    b, h, sq, sk, d = 2, 3, 5, 7, 8
    q, k, v = torch.randn(b, h, sq, d), torch.randn(b, h, sk, d), torch.randn(b, h, sk, d)
    _, full = count_flops(lambda: _attention(q, k, v, False))
    assert full["total"] == 4 * b * h * d * sq * sk  # QK^T and PV, 2 FLOPs a multiply-add
    _, masked = count_flops(lambda: _attention(q, k, v, False, torch.zeros(sq, sk)))
    assert masked["total"] == full["total"]  # a mask computes every block
    _, causal = count_flops(lambda: _attention(q, k, v, True))
    assert causal["total"] == 4 * b * h * d * sum(range(1, sq + 1))  # the lower triangle, top-left aligned


def test_attention_backward_counts_twice_its_forward_and_matmuls_count() -> None:
    b, h, s, d = 1, 2, 6, 4
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    w = torch.randn(d, d, requires_grad=True)

    def step() -> None:
        out, _ = _attention(q @ w, k, v, True)
        out.sum().backward()

    _, counted = count_flops(step)
    forward = 4 * b * h * d * sum(range(1, s + 1))
    assert counted["_scaled_dot_product_flash_attention_for_cpu"] == forward
    assert counted["_scaled_dot_product_flash_attention_for_cpu_backward"] == 2 * forward
    assert counted["total"] == 3 * forward + counted["mm"] + counted.get("bmm", 0)
    assert counted.get("mm", 0) + counted.get("bmm", 0) >= 3 * 2 * b * h * s * d * d  # q @ w, and its two grads
