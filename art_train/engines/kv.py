"""A KV cache layer that grows in place, for the embedded engine's decode loop.

transformers' `DynamicLayer` appends each new token with `torch.cat`, copying the whole cache of
every layer on every decode step: on CPU that copy was ~40% of a decode step at 32 sequences of
~400 tokens. `GrowingLayer` keeps keys and values in buffers with room to spare along the
sequence axis; a decode step writes one column and hands attention a view.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["GrowingLayer", "grow_in_place", "select_rows", "drop_leading"]

SPARE = 256  # sequence positions allocated ahead; a refill copies the cache once per SPARE steps


class GrowingLayer(DynamicLayer):
    """`keys`/`values` are views of `[batch, heads, capacity, dim]` buffers (None: not yet grown)."""

    keys: torch.Tensor  # set in __init__ (DynamicLayer's may be None)
    values: torch.Tensor

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        keys, values = keys.to(dtype or keys.dtype), values.to(dtype or values.dtype)
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None
        self._end = 0  # where the view ends in the buffers

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, new = self.keys.shape[-2], key_states.shape[-2]
        buf = self._kbuf
        if buf is None or self._end + new > buf.shape[-2]:
            shape = (*self.keys.shape[:2], n + new + SPARE, self.keys.shape[-1])
            self._kbuf, self._vbuf = self.keys.new_empty(shape), self.values.new_empty(shape)
            self._kbuf[:, :, :n] = self.keys
            self._vbuf[:, :, :n] = self.values
            self._end = n
        assert self._kbuf is not None and self._vbuf is not None
        start, end = self._end - n, self._end + new
        self._kbuf[:, :, self._end:end] = key_states
        self._vbuf[:, :, self._end:end] = value_states
        self._end = end
        self.keys, self.values = self._kbuf[:, :, start:end], self._vbuf[:, :, start:end]
        return self.keys, self.values

    def replace(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Replace the contents with standalone tensors; the next update allocates fresh buffers."""
        self.keys, self.values = keys, values
        self._kbuf = self._vbuf = None


def grow_in_place(cache: Any, dtype: torch.dtype | None = None) -> Any:
    """Swap a prefilled cache's layers for `GrowingLayer`s (same tensors, no copy, unless `dtype` differs).

    A half-precision model keeps its cache in float32 (``dtype``): CPU attention kernels decode one
    token ~4x slower from a bfloat16 cache than from a float32 one (see `attention`).
    """
    cache.layers = [GrowingLayer(layer.keys, layer.values, dtype) for layer in cache.layers]
    return cache


def select_rows(cache: Any, index: torch.Tensor) -> None:
    """Keep only the batch rows in `index` (sequences that finished leave the batch)."""
    for layer in cache.layers:
        layer.replace(layer.keys[index], layer.values[index])


def drop_leading(cache: Any, columns: int) -> None:
    """Drop the first `columns` positions (padding for every row left): a view, no copy."""
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[:, :, columns:], layer.values[:, :, columns:]
