"""LoRA adapters in PEFT format, merged straight into a model's weights.

On CPU a merged weight costs nothing per token, while an unmerged LoRA adds two small matmuls to
every projection of every token (vLLM's CPU LoRA kernels lose ~4x this way). So the engine keeps
the base weights aside and writes ``W = W0 + scale * B @ A`` for the adapter it serves.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

__all__ = ["BaseWeights", "load_lora_deltas"]


def load_lora_deltas(path: str | Path) -> dict[str, torch.Tensor]:
    """``{module name: scale * B @ A}`` for every LoRA pair in a PEFT adapter folder."""
    path = Path(path)
    config_file = path / "adapter_config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"{path} is not a PEFT adapter folder (no adapter_config.json)")
    config = json.loads(config_file.read_text())
    r, alpha = int(config["r"]), float(config.get("lora_alpha", config["r"]))
    scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    weights_file = path / "adapter_model.safetensors"
    if weights_file.exists():
        tensors = load_file(str(weights_file))
    else:
        tensors = torch.load(path / "adapter_model.bin", map_location="cpu", weights_only=True)
    deltas: dict[str, torch.Tensor] = {}
    for key, a in tensors.items():
        if ".lora_A." not in key:
            continue
        b = tensors[key.replace(".lora_A.", ".lora_B.")]
        module = key.split(".lora_A.")[0]
        module = module.removeprefix("base_model.model.")
        deltas[module] = (b.float() @ a.float()) * scale  # [out, in]
    if not deltas:
        raise ValueError(f"adapter {path} holds no lora_A/lora_B weights")
    return deltas


class BaseWeights:
    """The original weights of the modules an adapter touches, so any adapter can be merged afresh."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.saved: dict[str, torch.Tensor] = {}
        self.modules = dict(model.named_modules())

    def _module(self, name: str) -> Any:
        module = self.modules.get(name)
        if module is None or not hasattr(module, "weight"):
            raise ValueError(f"the adapter targets {name!r}, which this model does not have; was it trained on another base?")
        return module

    def apply(self, target: Any, deltas: dict[str, torch.Tensor] | None) -> None:
        """Set `target` (a copy of the model) to base weights plus `deltas` (None: the bare base)."""
        target_modules = dict(target.named_modules())
        touched = set(self.saved) | set(deltas or {})
        with torch.no_grad():
            for name in touched:
                if name not in self.saved:
                    self.saved[name] = self._module(name).weight.detach().clone()
                weight = target_modules[name].weight
                base = self.saved[name]
                if deltas and name in deltas:
                    weight.copy_((base.float() + deltas[name].to(base.device)).to(weight.dtype))
                else:
                    weight.copy_(base)
