"""Memory for a trainer and an embedded engine sharing one GPU: the engine's KV cache bounded so the step fits.

The engine holds, besides its weights, one merged copy of the weights per adapter in use (up to
``max_models - 1`` copies, see `art_train.lora`) and keys and values for at most ``max_batch``
sequences of at most ``max_seq_len`` tokens, plus its prefix cache. So its KV cache is bounded by

    kv_bytes = max_batch * max_seq_len * kv_bytes_per_token + prefix_cache_bytes
    kv_bytes_per_token = 2 (K and V) * layers * kv_heads * head_dim * bytes_per_element

and the colocated pair fits in ``total`` when

    weights * (1 + engine_copies) [engine] + trainer_peak + kv_bytes + headroom <= total

where ``trainer_peak`` is the trainer's measured peak for a step at its longest rows (weights,
fp32 LoRA with its gradient and AdamW state, activations; benchmarks/gpu measures it per shape)
and the trainer shares nothing with the engine. `fit_max_batch` solves this for ``max_batch``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DTYPE_BYTES", "engine_kv_bytes", "fit_max_batch", "kv_bytes_per_token"]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_bytes_per_token(config: Any, dtype: str = "bfloat16") -> int:
    """Bytes of keys and values one token holds across all layers (a transformers config)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * DTYPE_BYTES[dtype]


def engine_kv_bytes(config: Any, max_batch: int, max_seq_len: int, dtype: str = "bfloat16",
                    prefix_cache_bytes: int = 0) -> int:
    """The most KV-cache bytes the embedded engine can hold with these limits."""
    return max_batch * max_seq_len * kv_bytes_per_token(config, dtype) + prefix_cache_bytes


def fit_max_batch(config: Any, *, total_bytes: int, weight_bytes: int, trainer_peak_bytes: int, max_seq_len: int,
                  dtype: str = "bfloat16", engine_copies: int = 1, prefix_cache_bytes: int = 0,
                  headroom: float = 0.1) -> int:
    """The largest engine ``max_batch`` whose KV cache fits beside the trainer's step (0: none fits).

    `engine_copies`: merged adapter copies the engine keeps besides its base weights (``max_models - 1``
    when every slot holds an adapter). `headroom`: the fraction of `total_bytes` left for the allocator's
    fragmentation and CUDA's own use.

    Example:
        fit_max_batch(config, total_bytes=139 << 30, weight_bytes=15 << 30, trainer_peak_bytes=60 << 30,
                      max_seq_len=8192)
    """
    free = total_bytes * (1 - headroom) - weight_bytes * (1 + engine_copies) - trainer_peak_bytes - prefix_cache_bytes
    return max(0, int(free // (max_seq_len * kv_bytes_per_token(config, dtype))))
