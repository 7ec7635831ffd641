"""Keep no RMSNorm output for backward: rebuild it from the norm's input and 1/rms, which its backward keeps.

A decoder layer normalises its input twice (before attention and before the MLP), and the LoRA of every
projection that reads a norm's output keeps that output for its weight's gradient: 2 x hidden floats a
token a layer (4.5 KiB in SmolLM2-135M, a sixth of what a layer keeps). Here each decoder layer keeps a
note instead, and the output is computed again in backward with the same ops on the same values, so the
same gradients bit for bit (`tests/train/test_norms.py`). Element-wise work only.

Changed: layers with ``input_layernorm`` and ``post_attention_layernorm`` whose norms compute
``weight * (x * rsqrt(mean(x^2) + variance_epsilon))`` in float32 (Llama, Qwen2 and Qwen3, Mistral),
checked once per norm class on random values; others (Gemma's ``1 + weight``) are left as they are.
"""

from __future__ import annotations

import logging
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .saved import notes_for

__all__ = ["rebuild_norm_outputs"]

logger = logging.getLogger(__name__)

_NORMS = ("input_layernorm", "post_attention_layernorm")


class _Output:
    """One norm output not kept: how to compute it again, and the copy shared by its readers' backwards."""

    __slots__ = ("again", "cached", "dtype", "pending", "ref", "storage")

    def __init__(self, out: torch.Tensor, again: Callable[[], torch.Tensor]) -> None:
        self.ref = weakref.ref(out)  # alive: its storage is too, so no other tensor has that address
        self.storage = out.untyped_storage().data_ptr()
        self.dtype = out.dtype
        self.again = again
        self.pending = 0  # readers that kept a note and have not had it back yet
        self.cached: torch.Tensor | None = None

    def get(self) -> torch.Tensor:
        out = self.cached if self.cached is not None else self.again()
        self.pending -= 1
        self.cached = out if self.pending > 0 else None
        return out


def _norm_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    dtype = hidden_states.dtype
    x = hidden_states.to(torch.float32)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    out = self.weight * (x * rstd).to(dtype)
    outputs = getattr(self, "_art_outputs", None)
    if outputs is not None:  # the values the norm's own backward keeps already (and the weight autograd keeps)
        weight, x, rstd = self.weight, x.detach(), rstd.detach()
        outputs.append(_Output(out, lambda: weight * (x * rstd).to(dtype)))
    return out  # type: ignore[no-any-return]


def _layer_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    if not torch.is_grad_enabled():
        return self._art_forward(*args, **kwargs)
    outputs: list[_Output] = []

    def note(t: torch.Tensor) -> Any:
        for o in outputs:
            if o.storage == t.untyped_storage().data_ptr() and o.dtype == t.dtype and o.ref() is not None:
                o.pending += 1
                return o, t.size(), t.stride(), t.storage_offset()
        return None

    def rebuild(kept: Any) -> torch.Tensor:
        o, *view = kept
        return o.get().as_strided(*view)  # type: ignore[no-any-return]

    norms = [getattr(self, name) for name in _NORMS]
    for norm in norms:
        norm._art_outputs = outputs
    try:
        with notes_for(note, rebuild):
            return self._art_forward(*args, **kwargs)
    finally:
        for norm in norms:
            norm._art_outputs = None


@torch.no_grad()
def _same_formula(norm: Any) -> bool:
    weight = getattr(norm, "weight", None)
    if not isinstance(weight, torch.Tensor) or not hasattr(norm, "variance_epsilon"):
        return False
    if weight.device.type == "meta":
        return True
    x = torch.randn(3, weight.shape[-1], generator=torch.Generator().manual_seed(0)).to(weight.device, weight.dtype)
    return bool(torch.equal(norm.forward(x), _norm_forward(norm, x)))


def rebuild_norm_outputs(causal_lm: Any) -> int:
    """Make each decoder layer of `causal_lm` keep notes, not its RMSNorms' outputs; returns how many layers."""
    changed = 0
    checked: dict[type, bool] = {}
    for layer in causal_lm.modules():
        if not all(hasattr(layer, name) for name in _NORMS) or hasattr(layer, "_art_forward"):
            continue
        norms = [getattr(layer, name) for name in _NORMS]
        for norm in norms:
            if type(norm) not in checked:
                checked[type(norm)] = _same_formula(norm)
                if not checked[type(norm)]:
                    logger.debug("rebuild_norm_outputs: %s is not weight * x / rms(x); left as it is",
                                 type(norm).__name__)
        if not all(checked[type(norm)] for norm in norms):
            continue
        for norm in norms:
            norm.forward = types.MethodType(_norm_forward, norm)
        layer._art_forward = layer.forward
        layer.forward = types.MethodType(_layer_forward, layer)
        changed += 1
    return changed
