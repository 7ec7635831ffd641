"""Recompute the MLP's inner activations in backward instead of keeping them.

A gated MLP, ``down(act(gate(x)) * up(x))``, keeps gate(x), act(gate(x)), up(x) and their product for
its backward: 1,536 floats each a token in SmolLM2-135M, most of what a long row keeps. Two ways to
keep less:

- `recompute_mlp_products` (what the trainer does unless told otherwise; element-wise work only): a
  SiLU-gated MLP keeps gate(x) and up(x), and SiLU(gate(x)) and the product are computed again from
  them in backward (the product where down_proj's LoRA needs its input). The same gradients, bit for bit.
- `recompute_mlp` (`ModelConfig.recompute_mlp`; matmuls again): the part before ``down`` runs under a
  non-reentrant `torch.utils.checkpoint`: only its input is kept, and gate, up and the activation run
  again in backward (their LoRA included). The same gradients. Unlike `gradient_checkpointing` (whole
  layers), rows still share their prompt. Figures in docs/training.md.

Changed: every module with ``gate_proj``, ``up_proj``, ``down_proj`` and ``act_fn`` (Llama, Qwen2 and
Qwen3, Mistral, Gemma) whose own forward computes the formula: checked once per class on a small input
before it is replaced (not on the meta device, where there are no values); others are left as they are.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .saved import notes_for

__all__ = ["recompute_mlp", "recompute_mlp_products"]

logger = logging.getLogger(__name__)

_PARTS = ("gate_proj", "up_proj", "down_proj", "act_fn")


def _inner(mlp: Any, x: torch.Tensor) -> torch.Tensor:
    return mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)  # type: ignore[no-any-return]


def _forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    if not torch.is_grad_enabled():
        return self.down_proj(_inner(self, x))  # type: ignore[no-any-return]
    return self.down_proj(checkpoint(_inner, self, x, use_reentrant=False))  # type: ignore[no-any-return]


class _SiluTimes(torch.autograd.Function):
    """SiLU(gate) * up, keeping only gate and up: backward runs the ops autograd would, so the same bits.

    `shared` may hold SiLU(gate) already computed again in this backward (for down_proj's), used once.
    """

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, shared: dict[str, torch.Tensor]) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        ctx.shared = shared
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        gate, up = ctx.saved_tensors
        act = ctx.shared.pop("act", None)
        grad_gate = torch.ops.aten.silu_backward(grad * up, gate) if ctx.needs_input_grad[0] else None
        if not ctx.needs_input_grad[1]:
            return grad_gate, None, None
        return grad_gate, grad * (F.silu(gate) if act is None else act), None


def _products_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    if not torch.is_grad_enabled():  # F.silu, not act_fn: `_same_formula` checks the module against this
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # type: ignore[no-any-return]
    gate, up = self.gate_proj(x), self.up_proj(x)
    shared: dict[str, torch.Tensor] = {}
    product = _SiluTimes.apply(gate, up, shared)
    storage = product.untyped_storage().data_ptr()

    def note(t: torch.Tensor) -> Any:  # down_proj's LoRA keeps its input: keep a note to rebuild it instead
        if t.untyped_storage().data_ptr() == storage and t.dtype == product.dtype:
            return t.size(), t.stride(), t.storage_offset()
        return None

    def rebuild(view: Any) -> torch.Tensor:
        shared["act"] = act = F.silu(gate)  # for _SiluTimes's backward, which comes next
        return (act * up).as_strided(*view)  # type: ignore[no-any-return]

    with notes_for(note, rebuild):
        return self.down_proj(product)  # type: ignore[no-any-return]


@torch.no_grad()
def _same_formula(mlp: Any, forward: Any = _forward) -> bool:
    """Whether `mlp`'s own forward is `forward`'s formula, tried on a few random rows."""
    weight = mlp.gate_proj.weight
    if weight.device.type == "meta":
        return True
    x = torch.randn(3, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.device, weight.dtype)
    return bool(torch.allclose(mlp.forward(x), forward(mlp, x), rtol=1e-3, atol=1e-5))


def _replace(causal_lm: Any, forward: Any, formula: str, name: str, level: int) -> int:
    changed = 0
    checked: dict[type, bool] = {}
    for module in causal_lm.modules():
        if not all(hasattr(module, part) for part in _PARTS) or getattr(module, "_art_recomputes", False):
            continue
        if type(module) not in checked:
            checked[type(module)] = _same_formula(module, forward)
            if not checked[type(module)]:
                logger.log(level, "%s: %s does not compute %s; left as it is", name, type(module).__name__, formula)
        if checked[type(module)]:
            module.forward = types.MethodType(forward, module)
            module._art_recomputes = True
            changed += 1
    return changed


def recompute_mlp(causal_lm: Any) -> int:
    """Make each gated MLP of `causal_lm` recompute its inner activations in backward; returns how many."""
    return _replace(causal_lm, _forward, "down(act(gate(x)) * up(x))", "recompute_mlp", logging.WARNING)


def recompute_mlp_products(causal_lm: Any) -> int:
    """Make each SiLU-gated MLP of `causal_lm` keep only gate(x) and up(x) for backward; returns how many."""
    return _replace(causal_lm, _products_forward, "down(silu(gate(x)) * up(x))", "recompute_mlp_products",
                    logging.DEBUG)
