"""The frozen base model sharded over the trainer's ranks with torch's FSDP2 (`BackendConfig(train_shard="fsdp")`).

Each rank keeps 1/N of every base weight (`fully_shard` per decoder layer, and one group for the embeddings,
the final norm and the lm_head, tied or not); a layer's weights are all-gathered for its forward and again
for its backward, then freed. The LoRA stays whole on every rank (`ignored_params`): its gradients are
summed over ranks as without FSDP (`distributed.sum_grads`), and saving, merging and fingerprinting it
need no collective. FSDP computes no base gradients (frozen), so it only all-gathers.

Two rules follow from the all-gathers, which every rank must run in the same order:
- Every rank runs as many forwards (and backwards) as the busiest one: `pad` runs a batch's shortest row
  again, its loss times 0, on the ranks with fewer rows. The rows are sharded as without FSDP, one by one:
  no shared prompts (`SharedPrefix` sends gradients into the prompt's keys and values, past the layer
  outputs FSDP hooks its backward on; on GPU rows are packed and share nothing anyway).
- Every forward goes through one module, the root (`LogprobRoot`), so the embeddings and the lm_head,
  which `row_logprobs` reads outside any module call, are gathered around it. Forwards between steps (the
  weight-sync probe) are collective too: rank 0 sends them to the other ranks (`distributed.Logprobs`).

Only rank 0 reads the base from disk, whole, into host memory (`load_causal_lm(host=True)`), and the model
registers with the ranks as its `Trainer` is built (`Ranks.register`): `fully_shard` moves each rank's shards
to its device. Ranks 1..N-1 build the base empty (meta device) and receive their shards from rank 0 one
weight at a time (torch's `set_model_state_dict` with `broadcast_from_rank0`), so none of them holds more
than one weight whole. A failed step stops the other ranks and their shards with them: the next step starts them
again and rank 0 reads its base from disk again (`Trainer.reload_base`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .logprobs import SharedPrefix, row_logprobs
from .packing import Row

__all__ = ["LogprobRoot", "base_bytes", "pad", "padding", "shard_base"]

RowGroups = list[tuple[int, list[Row]]]


class LogprobRoot(nn.Module):
    """`row_logprobs` of the causal LM as one module call: FSDP's root, so all its weights are gathered inside."""

    def __init__(self, causal_lm: nn.Module) -> None:
        super().__init__()
        self.causal_lm = causal_lm

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, pred_index: torch.Tensor,
                targets: torch.Tensor, prefix: SharedPrefix | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return row_logprobs(self.causal_lm, input_ids, position_ids, pred_index, targets, prefix=prefix)


def shard_base(causal_lm: nn.Module, device: str) -> LogprobRoot:
    """Shard `causal_lm`'s frozen weights over the default process group; trainable ones stay whole.

    Every rank calls this; rank 0's weights (and buffers) are the ones every rank ends up with: the other
    ranks may call it with an empty model (meta device) and receive their shards. Returns the root every
    forward must go through from now on.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    layers = getattr(causal_lm.get_decoder(), "layers", None)  # type: ignore[operator]
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"train_shard='fsdp' shards a decoder's `layers` ModuleList, and {type(causal_lm).__name__}'s "
                         "decoder has none; train it with train_shard=None")
    mesh = DeviceMesh.from_group(dist.group.WORLD, device.split(":")[0])  # type: ignore[arg-type]
    whole = causal_lm.state_dict() if dist.get_rank() == 0 else {}  # rank 0's full weights, sent below
    lora = {p for p in causal_lm.parameters() if p.requires_grad}
    for layer in layers:
        fully_shard(layer, mesh=mesh, ignored_params=lora)
    root = LogprobRoot(causal_lm)
    # the rest (embeddings, final norm, lm_head), resharded after each forward too: FSDP keeps a root whole
    # after a forward without grad, and rank 0's `state_dict()` (saving the LoRA) would then reshard it on
    # rank 0 alone, so the next forward all-gathers it there and not elsewhere (a collective mismatch)
    fully_shard(root, mesh=mesh, ignored_params=lora, reshard_after_forward=True)
    if any(t.is_meta for t in [*causal_lm.parameters(), *causal_lm.buffers()]):
        causal_lm.to_empty(device=device)  # room for this rank's shards (and the LoRA): rank 0's values arrive next
    set_model_state_dict(causal_lm, whole, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    del whole
    with torch.no_grad():  # the buffers, non-persistent ones (rotary frequencies) included: no state_dict has them
        for _, buffer in sorted(causal_lm.named_buffers()):
            dist.broadcast(buffer, src=0)
    return root


def base_bytes(module: nn.Module) -> tuple[int, int]:
    """(bytes of the base weights this rank holds, bytes of the whole base): a sharded weight counts its shard."""
    held = whole = 0
    for p in module.parameters():
        if p.requires_grad:
            continue
        local = p.to_local() if hasattr(p, "to_local") else p  # a DTensor's shard
        held += local.numel() * local.element_size()
        whole += p.numel() * p.element_size()
    return held, whole


def padding(shards: list[RowGroups], rank: int) -> int:
    """How many more rows the busiest rank runs than `rank`, given every rank's share of a batch."""
    counts = [sum(len(rows) for _, rows in shard) for shard in shards]
    return max(counts) - counts[rank]


def pad(root: Any, rows: list[Row], n: int, *, backward: bool) -> None:
    """Run the shortest of `rows` `n` times through `root`, and with `backward` its loss times 0 back: the
    all-gathers of a rank's missing rows, adding exactly 0 to the LoRA gradients."""
    if n == 0:
        return
    row = min(rows, key=lambda r: len(r.input_ids))
    for _ in range(n):
        logp, _ = root(row.input_ids, row.position_ids, row.pred_index, row.targets)
        if backward:
            (logp.sum() * 0.0).backward()
