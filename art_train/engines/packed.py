"""bfloat16 linear layers on weights packed once for oneDNN, for the embedded engine on CPU.

`F.linear` on bfloat16 CPU tensors hands the weight to oneDNN, which reorders it into its blocked
layout on every call; at decode sizes (1 to 64 rows) that reorder is a large part of the multiply.
Packing once (`torch.ops.mkldnn._reorder_linear_weight`, what torch's inductor does for frozen
bfloat16 linears) and calling `_linear_pointwise` gives the same results bit for bit, faster
(`benchmarks/engine_flops.py`, docs/serving.md).

An engine packs its base model once and keeps only the packed weights (`pack(free=True)`; a merge
reads the originals back with `dense_weight`). A copy that serves an adapter shares every tensor of the
base except the weights the adapter changes, which are merged, packed and freed (`merge`): each weight
is held once, packed.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from ..lora import BaseWeights, LoraPair

__all__ = ["PackedLinear", "packable", "pack", "dense_weight", "merge"]

logger = logging.getLogger(__name__)


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


class PackedLinear(torch.nn.Linear):
    """`nn.Linear` that multiplies by `art_packed` (the weight in oneDNN's layout) when it is set.

    A module whose weight was freed (`pack(..., free=True)`, `merge`) has an empty `weight`: only
    `art_packed` holds its values.
    """

    art_packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.art_packed is None:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.art_packed, self.bias, "none", [], "")


def _linears(model: Any) -> Iterable[tuple[str, torch.nn.Linear]]:
    for name, module in model.named_modules():
        if type(module) in (torch.nn.Linear, PackedLinear) and module.weight.dtype == torch.bfloat16 \
                and module.weight.device.type == "cpu":
            yield name, module


def packable(model: Any) -> bool:
    """Whether `model` has bfloat16 CPU linears and this torch packs them with results equal to `F.linear`'s.

    Checked on the first linear with a random input of a few rows; a build without the ops, or one whose
    packed product differs (another oneDNN path on another CPU), is left unpacked, with the reason logged.
    """
    first = next(iter(_linears(model)), None)
    if first is None or not torch.backends.mkldnn.is_available():
        return False
    weight = first[1].weight.detach()
    try:
        x = torch.randn(5, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
        same = torch.equal(torch.ops.mkldnn._linear_pointwise(x, _reorder(weight), None, "none", [], ""),
                           F.linear(x, weight))
    except (RuntimeError, AttributeError) as exc:
        logger.info("bfloat16 linears stay unpacked: packing failed here (%s)", exc)
        return False
    if not same:
        logger.info("bfloat16 linears stay unpacked: the packed product differs from F.linear's on this CPU")
    return same


def pack(model: Any, free: bool = False) -> int:
    """Give every bfloat16 CPU linear of `model` a packed weight; returns how many.

    `free`: drop each plain weight that nothing else holds (`dense_weight` gives it back on demand); a weight
    shared with another module (an output layer tied to the embeddings) stays.
    """
    shared = {id(p) for m in model.modules() if not isinstance(m, torch.nn.Linear) for p in m.parameters(recurse=False)}
    count = 0
    with torch.no_grad():
        for _, module in list(_linears(model)):
            module.__class__ = PackedLinear
            module.art_packed = _reorder(module.weight)
            if free and id(module.weight) not in shared:
                _free(module)
            count += 1
    return count


def dense_weight(module: Any) -> torch.Tensor:
    """`module`'s weight as a plain tensor: its own, or unpacked from `art_packed` (a new tensor) when freed."""
    if module.weight.numel() == 0 and getattr(module, "art_packed", None) is not None:
        return module.art_packed.to_dense()
    return module.weight.detach()


def merge(weights: BaseWeights, model: Any, lora: dict[str, LoraPair] | None, target: Any = None) -> Any:
    """`weights.apply` for packed `model` (whose base `weights` reads): `target`, an earlier result to reuse,
    or None for a new copy, gets fresh storage for every weight the merge writes, which are then merged,
    packed and freed. Returns the target."""
    names = weights.touched | set(lora or {})
    target = _copy(model) if target is None else target
    modules = dict(target.named_modules())
    for name in names:
        module = modules[name]
        module.weight = torch.nn.Parameter(
            torch.empty(module.out_features, module.in_features, dtype=module.weight.dtype,
                        device=module.weight.device), requires_grad=False)
    weights.apply(target, lora)
    with torch.no_grad():
        for name in names:
            if isinstance(modules[name], PackedLinear):
                modules[name].art_packed = _reorder(modules[name].weight)
                _free(modules[name])
    return target


def _copy(model: Any) -> Any:
    """A copy of packed `model` sharing all its tensors (the packed ones cannot be deep-copied: oneDNN's opaque
    layout; the rest would cost memory for nothing); `merge` gives the ones it writes their own storage."""
    memo: dict[int, Any] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        memo[id(tensor)] = tensor
    for module in model.modules():
        if isinstance(module, PackedLinear) and module.art_packed is not None:
            memo[id(module.art_packed)] = module.art_packed
    return copy.deepcopy(model, memo)


def _free(module: Any) -> None:
    module.weight = torch.nn.Parameter(module.weight.new_empty(0), requires_grad=False)
