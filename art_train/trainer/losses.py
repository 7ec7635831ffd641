"""Policy losses as small pure functions of per-token tensors.

Tokens of all sequences in a batch are flattened: every tensor here is [N] (one entry per trained
token) and `seq_ids` [N] says which sequence a token belongs to. A loss returns the per-token loss
[N]; the step reduces it with `token_weights` (each loss names its normalisation), which lets a
packed, chunked forward accumulate exactly the same gradient as one big batch.

Variants (`TrainConfig.loss`), following TRL 1.16's GRPOTrainer:
- grpo: PPO-style clipped ratio, mean per sequence (trajectory), then over sequences.
- dr_grpo: the same clipped ratio, summed and divided by a constant (sequences x max tokens).
- dapo: the same clipped ratio, token-level mean over the batch.
- gspo: one ratio per sequence, exp(mean log-ratio), clipped; mean per sequence.
- cispo: REINFORCE on logprobs weighted by the detached ratio capped at 1 + epsilon_high; token mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = [
    "LOSSES",
    "LossSpec",
    "cispo_loss",
    "clip_fraction",
    "clipped_ratio_loss",
    "gspo_loss",
    "kl_k3",
    "sequence_mean",
    "token_weights",
    "truncated_is_weights",
]

Normalization = Literal["sequence", "token", "constant"]


def clipped_ratio_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    seq_ids: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> torch.Tensor:
    """-min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A) per token, r = exp(logp - old_logp)."""
    ratio = torch.exp(logp - old_logp)  # [N]
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)  # [N]
    return -torch.min(ratio * adv, clipped * adv)  # [N]


def sequence_mean(x: torch.Tensor, seq_ids: torch.Tensor, n_seqs: int) -> torch.Tensor:
    """Mean of x over each sequence's tokens, broadcast back to its tokens. [N] -> [N]."""
    sums = torch.zeros(n_seqs, dtype=x.dtype, device=x.device).index_add(0, seq_ids, x)  # [S]
    counts = torch.bincount(seq_ids, minlength=n_seqs).clamp(min=1).to(x.dtype)  # [S]
    return (sums / counts)[seq_ids]  # [N]


def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    seq_ids: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> torch.Tensor:
    """The clipped objective on one ratio per sequence: s = exp(mean_t(logp - old_logp))."""
    n_seqs = int(seq_ids.max()) + 1 if seq_ids.numel() else 0
    seq_log_ratio = sequence_mean(logp - old_logp, seq_ids, n_seqs)  # [N], same value within a sequence
    ratio = torch.exp(seq_log_ratio)  # [N]
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)  # [N]
    return -torch.min(ratio * adv, clipped * adv)  # [N]


def cispo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    seq_ids: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> torch.Tensor:
    """-sg(min(r, 1 + eps_high)) * A * logp: the gradient always flows through logp."""
    weight = torch.clamp(torch.exp(logp - old_logp), max=1 + eps_high).detach()  # [N]
    return -weight * adv * logp  # [N]


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(policy || ref) per token: exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    d = ref_logp - logp  # [N]
    return torch.exp(d) - d - 1  # [N]


def truncated_is_weights(old_logp: torch.Tensor, sampler_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """min(exp(old_logp - sampler_logp), cap) per token; 1 where the sampler's logprob is unknown (NaN)."""
    w = torch.clamp(torch.exp(old_logp - sampler_logp), max=cap)  # [N]
    return torch.where(torch.isnan(sampler_logp), torch.ones_like(w), w).detach()  # [N]


def clip_fraction(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    """Share of tokens whose ratio was clipped in the direction the advantage pushes (TRL's definition)."""
    ratio = torch.exp(logp - old_logp).detach()  # [N]
    clipped = ((ratio < 1 - eps_low) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))  # [N]
    return clipped.float().mean() if clipped.numel() else torch.tensor(0.0)


def token_weights(
    seq_ids: torch.Tensor, unit_ids: torch.Tensor, normalization: Normalization, max_tokens: int
) -> torch.Tensor:
    """Per-token weights w such that the batch loss is sum(per_token_loss * w). [N] -> [N].

    - "sequence": each unit (a trajectory, or a sequence) weighs the same: 1 / (tokens of its unit x units).
      `unit_ids` [N] names the unit of each token.
    - "token": 1 / N, every token weighs the same.
    - "constant": 1 / (sequences x max_tokens) (Dr. GRPO).
    """
    n = seq_ids.numel()
    if n == 0:
        return torch.zeros(0)
    if normalization == "token":
        return torch.full((n,), 1.0 / n)
    if normalization == "constant":
        n_seqs = int(torch.unique(seq_ids).numel())
        return torch.full((n,), 1.0 / (n_seqs * max_tokens))
    counts = torch.bincount(unit_ids).to(torch.float64)  # [U]
    n_units = int((counts > 0).sum())
    return (1.0 / (counts[unit_ids] * n_units)).to(torch.float32)  # [N]


PerTokenLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, float], torch.Tensor]


@dataclass(frozen=True)
class LossSpec:
    per_token: PerTokenLoss
    normalization: Normalization


LOSSES: dict[str, LossSpec] = {
    "grpo": LossSpec(clipped_ratio_loss, "sequence"),
    "dr_grpo": LossSpec(clipped_ratio_loss, "constant"),
    "dapo": LossSpec(clipped_ratio_loss, "token"),
    "gspo": LossSpec(gspo_loss, "sequence"),
    "cispo": LossSpec(cispo_loss, "token"),
}
