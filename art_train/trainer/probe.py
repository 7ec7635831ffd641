"""The trainer's side of the weight-sync check: logprobs of a probe sequence under a checkpoint.

The service compares them with what the engine serves for the same checkpoint. When the engine
serves in half precision and the trainer trains in float32, the two can only agree exactly if the
trainer computes the probe the way the engine does: base weights at the engine's precision, the
adapter merged in float32 and rounded once (`adapters.BaseWeights`). That needs the base model at
that precision, so `HalfPrecisionReference` keeps one, loaded on first use and only then. It stays
because nothing cheaper gives the same rounding: casting the trainer's float32 model on the fly
would need the same memory for a moment at every swap, and a tolerance loose enough for float32
against bfloat16 (~0.25 on some tokens) would no longer catch an engine serving the wrong step.
The originals a merge starts from are the trainer's frozen base weights, cast one module at a time
(the same rounding as loading the base at that precision), so the reference clones none of its own.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch

from .logprobs import row_logprobs

__all__ = ["HalfPrecisionReference", "adapter_logprobs"]


@torch.no_grad()
def adapter_logprobs(peft: Any, sequences: list[list[int]], checkpoint: Path | None = None,
                     root: Any = None) -> list[list[float]]:
    """For each sequence, log p(token_i | tokens before it) for i >= 1 under the trained adapter, or
    the one saved at `checkpoint` (loaded once for all the sequences). `root`: the FSDP root of a sharded
    base (`fsdp.LogprobRoot`), which the forwards go through instead."""

    def run() -> list[list[float]]:
        causal_lm = peft.get_base_model()
        forward = root if root is not None else partial(row_logprobs, causal_lm)
        out: list[list[float]] = []
        for token_ids in sequences:
            if len(token_ids) < 2:
                out.append([])
                continue
            ids = torch.tensor(token_ids)
            logp, _ = forward(ids, torch.arange(len(ids)), torch.arange(len(ids) - 1), ids[1:])
            out.append(logp.float().cpu().tolist())
        return out

    if checkpoint is None:
        return run()
    peft.load_adapter(str(checkpoint), adapter_name="_probe")
    try:
        peft.set_adapter("_probe", inference_mode=True)
        return run()
    finally:
        peft.set_adapter("default")
        peft.delete_adapter("_probe")


class HalfPrecisionReference:
    """The base model at an engine's precision, with an adapter merged the engine's way."""

    def __init__(self, base_path: Path, device: str) -> None:
        self.base_path = base_path
        self.device = device
        self._loaded: tuple[str, bool, Any] | None = None  # (dtype, whole, BaseWeights)
        self._trainer: dict[str, Any] = {}  # the trainer's modules by name ("" the model), their weights the originals

    def _original(self, name: str) -> torch.Tensor:
        assert self._loaded is not None
        module = self._trainer[name]
        layer = module.get_base_layer() if hasattr(module, "get_base_layer") else module
        return layer.weight.detach().to(self._loaded[2].modules[name].weight.dtype)

    def logprobs(self, sequences: list[list[int]], dtype: str, peft: Any, checkpoint: Path | None,
                 whole: bool = True) -> list[list[float]]:
        """Probe logprobs of each sequence with the trained adapter (`checkpoint` None) or a saved one,
        merged at `dtype` once for all the sequences. `whole`: the trainer holds its whole base (not
        sharded), so its weights are the originals; otherwise the reference clones the ones it merges."""
        from peft import get_peft_model_state_dict

        from ..lora import BaseWeights, load_lora, lora_pairs, merges_half, probe_logprobs_batch
        from ..models import load_causal_lm

        if all(len(ids) < 2 for ids in sequences):
            return [[] for _ in sequences]
        trainer = peft.get_base_model()
        if not whole:
            self._trainer = {}
        elif self._trainer.get("") is not trainer:  # a new trainer model (a reloaded base): its modules again
            self._trainer = dict(trainer.named_modules())
        if self._loaded is None or self._loaded[:2] != (dtype, whole):
            model = load_causal_lm(self.base_path, dtype=dtype, device=self.device)
            model.requires_grad_(False)
            self._loaded = (dtype, whole, BaseWeights(model, merge_half=merges_half(self.device),
                                                      originals=self._original if whole else None))
        base = self._loaded[2]
        if checkpoint is None:
            config = peft.peft_config["default"].to_dict()
            pairs = lora_pairs(get_peft_model_state_dict(peft), config)
        else:
            pairs = load_lora(checkpoint)
        base.apply(base.model, pairs)
        return probe_logprobs_batch(base.model, sequences)
