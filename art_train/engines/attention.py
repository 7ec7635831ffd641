"""Attention for a half-precision engine whose KV cache is float32.

On CPU, PyTorch's scaled-dot-product attention decodes one token from a bfloat16 cache ~4x slower
than from a float32 one (5.4 ms against 1.1 ms a layer at 32 sequences of ~400 tokens), which cost
more than bfloat16 weights saved. So a bfloat16 engine keeps its cache in float32 (`kv.grow_in_place`)
and uses this attention: the query is raised to the cache's dtype and the output brought back.

Nothing is registered at import: `use_float32_cache_attention` registers it (once) when an engine
switches a model to it.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ..models import use_sdpa_variant

__all__ = ["NAME", "use_float32_cache_attention"]

NAME = "art_sdpa"


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, Any]:
    if key.dtype == query.dtype:
        return sdpa_attention_forward(module, query, key, value, *args, **kwargs)
    out, weights = sdpa_attention_forward(module, query.to(key.dtype), key, value.to(key.dtype), *args, **kwargs)
    return out.to(query.dtype), weights


def use_float32_cache_attention(model: Any) -> None:
    """Switch `model` (an sdpa model) to the attention above, registering it first (`models.use_sdpa_variant`)."""
    use_sdpa_variant(model, NAME, _attention)
