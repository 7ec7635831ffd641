"""Counts of a step's work that do not depend on the machine: a guard against a step that quietly does more.

Timings are noisy on shared machines; these counts are exact. `DecoderCounter` counts the tokens and
calls that go through the decoder (every forward: shared prefixes, suffixes, old and reference
logprobs); `saved_bytes_peak` measures the most bytes autograd holds for backward at once, which on a
CPU (no allocator statistics) stands for the step's activation memory.

Example:
    counter = DecoderCounter(causal_lm)
    before = counter.snapshot()
    ...  # the step
    metrics |= counter.since(before, trained_tokens)
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["DecoderCounter", "SavedBytes", "saved_bytes_peak", "work_metrics"]


class DecoderCounter:
    """Tokens and calls through `causal_lm`'s decoder, counted by a forward pre-hook (kept for the model's life)."""

    def __init__(self, causal_lm: Any) -> None:
        self.tokens = 0
        self.calls = 0
        causal_lm.get_decoder().register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module: Any, args: tuple, kwargs: dict) -> None:  # noqa: ARG002
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        if ids is not None:
            self.tokens += int(ids.numel())
        elif embeds is not None:
            self.tokens += int(embeds.shape[0] * embeds.shape[1])
        self.calls += 1

    def snapshot(self) -> tuple[int, int]:
        return self.tokens, self.calls

    def since(self, start: tuple[int, int], trained_tokens: int, rows: int) -> dict[str, float]:
        """The step's `work/*` metrics: decoder tokens and calls since `start`, per trained token and per row."""
        return work_metrics(self.tokens - start[0], self.calls - start[1], trained_tokens, rows)


def work_metrics(tokens: int, calls: int, trained_tokens: int, rows: int) -> dict[str, float]:
    """A step's `work/*` metrics from its decoder tokens and calls."""
    return {
        "work/decoder_tokens": tokens,
        "work/decoder_calls": calls,
        "work/decoder_tokens_per_trained_token": tokens / max(trained_tokens, 1),
        "work/decoder_calls_per_row": calls / max(rows, 1),
    }


@dataclass
class SavedBytes:
    """The result of `saved_bytes_peak`: the peak and the current bytes of tensors saved for backward."""

    peak: int = 0
    current: int = 0


class _Held:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


@contextmanager
def saved_bytes_peak(params: list[torch.Tensor]) -> Iterator[SavedBytes]:
    """Track the bytes autograd saves for backward inside the block (weights in `params` not counted).

    A saved tensor counts from when its graph saves it until the graph frees it (CPython frees it at
    once, so the count is deterministic). Views of one storage count once per save, as a bound.
    """
    result = SavedBytes()
    weights = {p.untyped_storage().data_ptr() for p in params}

    def pack(t: torch.Tensor) -> Any:
        if t.untyped_storage().data_ptr() in weights:
            return t
        held = _Held(t.detach())  # detached: holding `t` itself (an output, with its grad_fn) would be a cycle
        size = t.numel() * t.element_size()
        result.current += size
        result.peak = max(result.peak, result.current)
        weakref.finalize(held, _release, result, size)
        return held

    def unpack(held: Any) -> torch.Tensor:
        return held.tensor if isinstance(held, _Held) else held

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield result


def _release(result: SavedBytes, size: int) -> None:
    result.current -= size
