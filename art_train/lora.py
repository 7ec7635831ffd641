"""LoRA adapters in PEFT format, merged into a model's weights or applied beside them.

On CPU a merged weight costs nothing per token, while an unmerged LoRA adds two small matmuls to
every projection of every token (vLLM's CPU LoRA kernels lose ~4x this way). So the engine keeps
the base weights aside and writes ``W = W0 + scale * B @ A`` for the adapter it serves.

Merged into half-precision weights, a small step rounds away: at lr 1e-5 the change to a bfloat16
weight is below half its last bit, so the engine would go on serving the previous weights (seen on
an H200: the weight-sync check refused every correct load). Where `merges_half` says no (CUDA, where
two small matmuls cost little), a half-precision model keeps its base weights and adds the LoRA term
in float32 beside each projection, rounding the sum once, as peft computes it in the trainer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

__all__ = ["BaseWeights", "LoraPair", "load_lora", "lora_pairs", "merges_half", "probe_logprobs_batch"]


@dataclass(frozen=True)
class LoraPair:
    """One module's LoRA: its weight moves by ``scale * b @ a`` (b: [out, r], a: [r, in])."""

    b: torch.Tensor
    a: torch.Tensor
    scale: float


def load_lora(path: str | Path) -> dict[str, LoraPair]:
    """``{module name: LoraPair}`` for every LoRA pair in a PEFT adapter folder.

    The full-size ``b @ a`` is never built here: merging writes it straight into the weights.
    """
    path = Path(path)
    config_file = path / "adapter_config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"{path} is not a PEFT adapter folder (no adapter_config.json)")
    weights_file = path / "adapter_model.safetensors"
    if weights_file.exists():
        tensors = load_file(str(weights_file))
    else:
        tensors = torch.load(path / "adapter_model.bin", map_location="cpu", weights_only=True)
    pairs = lora_pairs(tensors, json.loads(config_file.read_text()))
    if not pairs:
        raise ValueError(f"adapter {path} holds no lora_A/lora_B weights")
    return pairs


def lora_pairs(tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, LoraPair]:
    """Pairs from a PEFT state dict (``...q_proj.lora_A.weight`` keys) and its adapter config."""
    r, alpha = int(config["r"]), float(config.get("lora_alpha", config["r"]))
    scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    pairs: dict[str, LoraPair] = {}
    for key, a in tensors.items():
        if ".lora_A." not in key:
            continue
        b = tensors[key.replace(".lora_A.", ".lora_B.")]
        module = key.split(".lora_A.")[0].removeprefix("base_model.model.")
        pairs[module] = LoraPair(b.detach().float(), a.detach().float(), scale)
    return pairs


def probe_logprobs_batch(model: Any, sequences: list[list[int]], max_tokens: int = 2048) -> list[list[float]]:
    """For each sequence, the logprob of every token after the first under `model`: the weight-sync
    probe. Several sequences a forward pass (right-padded, up to `max_tokens` padded tokens); the
    engine and the trainer's reference call it on the same list, so they agree exactly."""
    device = next(model.parameters()).device
    out: list[list[float]] = [[] for _ in sequences]
    todo = [i for i, ids in enumerate(sequences) if len(ids) >= 2]
    while todo:
        chunk = [todo.pop(0)]
        while todo and (len(chunk) + 1) * max(len(sequences[i]) for i in [*chunk, todo[0]]) <= max_tokens:
            chunk.append(todo.pop(0))
        width = max(len(sequences[i]) for i in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(chunk):
            ids[row, : len(sequences[i])] = torch.tensor(sequences[i], device=device)
            mask[row, : len(sequences[i])] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=mask).logits
        for row, i in enumerate(chunk):
            n = len(sequences[i])
            logp = torch.log_softmax(logits[row, : n - 1].float(), dim=-1)
            out[i] = logp.gather(1, ids[row, 1:n, None])[:, 0].tolist()
        del logits
    return out


def merges_half(device: Any) -> bool:
    """Whether a half-precision model on `device` merges adapters into its weights (CPU: speed) or
    applies them unmerged (CUDA: the step is served exactly). Engine and trainer reference ask the same."""
    return not str(device).startswith("cuda")


def _unmerged(module: Any, args: tuple, output: torch.Tensor) -> torch.Tensor:
    """Forward hook: ``y + scale * B(A x)`` with the LoRA term in float32, rounded once (peft's order)."""
    pair = getattr(module, "art_lora", None)
    if pair is None:
        return output
    delta = (args[0].float() @ pair.a.T) @ pair.b.T  # [..., out]
    return (output.float() + pair.scale * delta).to(output.dtype)


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() > 0 and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


class BaseWeights:
    """The original weights of the modules an adapter touches, so any adapter can be merged afresh.

    `merge_half`: False applies an adapter unmerged to half-precision weights (see `merges_half`).
    `originals`: where a module's original weight comes from, by name, at the target's dtype, when something
    else holds it (an engine's base, merged into copies only; the trainer's frozen base): nothing is cloned
    then, and a target whose weight is the original itself is refused.
    """

    def __init__(self, model: Any, merge_half: bool = True,
                 originals: Callable[[str], torch.Tensor] | None = None) -> None:
        self.model = model
        self.merge_half = merge_half
        self.originals = originals
        self.saved: dict[str, torch.Tensor] = {}
        self.touched: set[str] = set()  # every module a merge has written, back to its original when unused
        self.modules = dict(model.named_modules())

    def _module(self, name: str) -> Any:
        module = self.modules.get(name)
        if module is None or not hasattr(module, "weight"):
            raise ValueError(f"the adapter targets {name!r}, which this model does not have; was it trained on another base?")
        return module

    def apply(self, target: Any, lora: dict[str, LoraPair] | None) -> None:
        """Set `target` (a copy of the model) to base weights plus `lora` (None: the bare base).

        One pass per weight: ``W = W0 + scale * b @ a`` is written in place by addmm.
        """
        target_modules = dict(target.named_modules())
        for name in set(lora or {}) - self.touched:
            self._module(name)  # an unknown module fails before anything is written
        self.touched |= set(lora or {})
        with torch.no_grad():
            for name in sorted(self.touched):
                if self.originals is not None:
                    base = self.originals(name)
                    if _same_storage(base, target_modules[name].weight):
                        raise ValueError(f"the original of {name!r} is the merge target's own weight: merge into a copy")
                elif name not in self.saved:
                    base = self.saved[name] = self._module(name).weight.detach().clone()
                else:
                    base = self.saved[name]
                weight = target_modules[name].weight
                pair = lora.get(name) if lora else None
                module = target_modules[name]
                if getattr(module, "art_lora", None) is not None:
                    module.art_lora = None
                if pair is None:
                    weight.copy_(base)
                    continue
                b, a = pair.b.to(base.device), pair.a.to(base.device)
                if weight.dtype != torch.float32 and not self.merge_half:
                    weight.copy_(base)
                    module.art_lora = LoraPair(b.float(), a.float(), pair.scale)
                    if not hasattr(module, "art_lora_hook"):
                        module.art_lora_hook = module.register_forward_hook(_unmerged)
                elif weight.dtype == torch.float32 and base.dtype == torch.float32:
                    torch.addmm(base, b, a, alpha=pair.scale, out=weight)
                else:  # half precision: add in float32, round once
                    weight.copy_(torch.addmm(base.float(), b, a, alpha=pair.scale))
