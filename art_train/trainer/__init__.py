"""The trainer: trajectories -> tokens -> packed rows -> GRPO / SFT on a peft LoRA -> checkpoints."""

from .advantages import GroupAdvantages, group_advantages, step_advantages
from .logprobs import SharedPrefix, row_logprobs, selected_logprobs
from .losses import (
    LOSSES,
    LossSpec,
    cispo_loss,
    clip_fraction,
    clipped_ratio_loss,
    gspo_loss,
    kl_k3,
    sequence_mean,
    token_weights,
    truncated_is_weights,
)
from .packing import Row, build_rows, pack_indices, prefix_groups
from .tokenize import (
    Sequence,
    TokenizeStats,
    check_prefix_preserving,
    fit_length,
    tokenize_history,
    tokenize_trajectory,
)
from .trainer import Progress, Trainer

__all__ = [
    "LOSSES",
    "GroupAdvantages",
    "LossSpec",
    "Progress",
    "Row",
    "Sequence",
    "SharedPrefix",
    "TokenizeStats",
    "Trainer",
    "build_rows",
    "check_prefix_preserving",
    "cispo_loss",
    "clip_fraction",
    "clipped_ratio_loss",
    "fit_length",
    "group_advantages",
    "gspo_loss",
    "kl_k3",
    "pack_indices",
    "prefix_groups",
    "row_logprobs",
    "selected_logprobs",
    "sequence_mean",
    "step_advantages",
    "token_weights",
    "tokenize_history",
    "tokenize_trajectory",
    "truncated_is_weights",
]
