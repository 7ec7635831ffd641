"""The trainer: trajectories -> tokens -> packed rows -> GRPO / SFT on a peft LoRA -> checkpoints.

Modules: `advantages`, `tokenize`, `packing`, `logprobs`, `losses` (pure functions of tensors);
`policy` (the LoRA model and optimizer a step works on); `grpo` and `sft` (one step each, top to
bottom); `checkpoints` (save, resume, the pending-step journal, retention); `probe` (the
weight-sync probe); `trainer` (`Trainer`, which holds the state and calls them); `distributed` and
`rank` (the same step on N torch.distributed ranks, `BackendConfig(train_procs=N)`), `ray_ranks` (ranks
1..N-1 as Ray actors, `train_launcher="ray"`), `fsdp` (their frozen base sharded with FSDP2,
`BackendConfig(train_shard="fsdp")`).
"""

from .advantages import GroupAdvantages, group_advantages, step_advantages
from .checkpoints import Checkpoints, best_step, checkpoints_to_delete, metric_values
from .grpo import grpo_step
from .logprobs import SharedPrefix, row_logprobs, rows_logprobs, selected_logprobs
from .losses import (
    LOSSES,
    LossSpec,
    PolicyLossTerms,
    cispo_loss,
    clip_fraction,
    clipped_ratio_loss,
    gspo_loss,
    kl_k3,
    loss_spec,
    policy_loss,
    sequence_mean,
    token_weights,
    truncated_is_weights,
)
from .packing import Row, build_rows, pack_indices, prefix_groups, row_groups, split_batches
from .policy import Policy, Progress
from .sft import sft_step
from .tokenize import (
    Sequence,
    TokenizeStats,
    check_prefix_preserving,
    fit_length,
    tokenize_history,
    tokenize_trajectory,
)
from .trainer import Trainer

__all__ = [
    "LOSSES",
    "Checkpoints",
    "GroupAdvantages",
    "LossSpec",
    "Policy",
    "PolicyLossTerms",
    "Progress",
    "Row",
    "Sequence",
    "SharedPrefix",
    "TokenizeStats",
    "Trainer",
    "best_step",
    "build_rows",
    "check_prefix_preserving",
    "checkpoints_to_delete",
    "cispo_loss",
    "clip_fraction",
    "clipped_ratio_loss",
    "fit_length",
    "group_advantages",
    "grpo_step",
    "gspo_loss",
    "kl_k3",
    "loss_spec",
    "metric_values",
    "pack_indices",
    "policy_loss",
    "prefix_groups",
    "row_groups",
    "row_logprobs",
    "rows_logprobs",
    "selected_logprobs",
    "sequence_mean",
    "sft_step",
    "split_batches",
    "step_advantages",
    "token_weights",
    "tokenize_history",
    "tokenize_trajectory",
    "truncated_is_weights",
]
