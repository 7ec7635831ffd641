"""The trainer's side of the weight-sync check: logprobs of a probe sequence under a checkpoint.

The service compares them with what the engine serves for the same checkpoint. When the engine
serves in half precision and the trainer trains in float32, the two can only agree exactly if the
trainer computes the probe the way the engine does: base weights at the engine's precision, the
adapter merged in float32 and rounded once (`adapters.BaseWeights`). That needs the base model at
that precision, so `HalfPrecisionReference` keeps one, loaded on first use and only then. It stays
because nothing cheaper gives the same rounding: casting the trainer's float32 model on the fly
would need the same memory for a moment at every swap, and a tolerance loose enough for float32
against bfloat16 (~0.25 on some tokens) would no longer catch an engine serving the wrong step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .logprobs import row_logprobs

__all__ = ["HalfPrecisionReference", "adapter_logprobs"]


@torch.no_grad()
def adapter_logprobs(peft: Any, token_ids: list[int], checkpoint: Path | None = None) -> list[float]:
    """log p(token_i | tokens before it) for i >= 1 under the trained adapter, or the one saved at `checkpoint`."""
    if len(token_ids) < 2:
        return []
    ids = torch.tensor(token_ids)
    pos = torch.arange(len(token_ids))
    pred = torch.arange(len(token_ids) - 1)
    causal_lm = peft.get_base_model()
    if checkpoint is None:
        logp, _ = row_logprobs(causal_lm, ids, pos, pred, ids[1:])
        return logp.float().cpu().tolist()
    peft.load_adapter(str(checkpoint), adapter_name="_probe")
    try:
        peft.set_adapter("_probe", inference_mode=True)
        logp, _ = row_logprobs(causal_lm, ids, pos, pred, ids[1:])
    finally:
        peft.set_adapter("default")
        peft.delete_adapter("_probe")
    return logp.float().cpu().tolist()


class HalfPrecisionReference:
    """The base model at an engine's precision, with an adapter merged the engine's way."""

    def __init__(self, base_path: Path, device: str) -> None:
        self.base_path = base_path
        self.device = device
        self._loaded: tuple[str, Any] | None = None  # (dtype, BaseWeights)

    def logprobs(self, token_ids: list[int], dtype: str, peft: Any, checkpoint: Path | None) -> list[float]:
        """Probe logprobs with the trained adapter (`checkpoint` None) or a saved one, merged at `dtype`."""
        from peft import get_peft_model_state_dict

        from ..engines.adapters import BaseWeights, load_lora, lora_pairs, probe_logprobs
        from ..models import load_causal_lm

        if len(token_ids) < 2:
            return []
        if self._loaded is None or self._loaded[0] != dtype:
            model = load_causal_lm(self.base_path, dtype=dtype, device=self.device)
            model.requires_grad_(False)
            self._loaded = (dtype, BaseWeights(model))
        base = self._loaded[1]
        if checkpoint is None:
            config = peft.peft_config["default"].to_dict()
            pairs = lora_pairs(get_peft_model_state_dict(peft), config)
        else:
            pairs = load_lora(checkpoint)
        base.apply(base.model, pairs)
        return probe_logprobs(base.model, token_ids)
