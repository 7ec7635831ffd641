"""Keep no norm output for backward: compute it again from the norm's input, which its own backward keeps.

A decoder layer normalises its input twice (before attention and before the MLP), and the LoRA of every
projection that reads a norm's output keeps that output for its weight's gradient: 2 x hidden floats a
token a layer (4.5 KiB in SmolLM2-135M, a sixth of what a layer keeps). Here each decoder layer keeps a
note instead, and in backward the norm runs again on its input (kept anyway: a norm's backward needs it),
so the same values and the same gradients bit for bit (`tests/train/test_norms.py`). Element-wise work only.

Changed: every layer with ``input_layernorm`` and ``post_attention_layernorm`` (Llama, Qwen2 and Qwen3,
Mistral, Gemma). The norms are watched by forward hooks, not given a new ``forward``: transformers may
swap a norm's ``forward`` for a hub kernel's whenever the model changes mode, and the note then runs
that kernel again.
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .saved import notes_for

__all__ = ["rebuild_norm_outputs"]

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
        if self.cached is not None:
            out = self.cached
        else:
            with torch.no_grad():
                out = self.again()
        self.pending -= 1
        self.cached = out if self.pending > 0 else None
        return out


class _Layer:
    """A layer's norm outputs of the forward in progress (None outside one)."""

    __slots__ = ("outputs",)

    def __init__(self) -> None:
        self.outputs: list[_Output] | None = None


def _watch(layer: _Layer, norm: Any, args: tuple[Any, ...], out: Any) -> None:
    if layer.outputs is None or len(args) != 1 or not isinstance(out, torch.Tensor):
        return
    x = args[0].detach()  # kept by the norm's own backward already
    layer.outputs.append(_Output(out, lambda: norm(x)))


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

    self._art_norms.outputs = outputs
    try:
        with notes_for(note, rebuild):
            return self._art_forward(*args, **kwargs)
    finally:
        self._art_norms.outputs = None


def rebuild_norm_outputs(causal_lm: Any) -> int:
    """Make each decoder layer of `causal_lm` keep notes, not its norms' outputs; returns how many layers."""
    changed = 0
    for layer in causal_lm.modules():
        if not all(hasattr(layer, name) for name in _NORMS) or hasattr(layer, "_art_norms"):
            continue
        layer._art_norms = state = _Layer()
        for name in _NORMS:
            getattr(layer, name).register_forward_hook(functools.partial(_watch, state))
        layer._art_forward = layer.forward
        layer.forward = types.MethodType(_layer_forward, layer)
        changed += 1
    return changed
