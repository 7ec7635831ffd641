"""Policy losses as small pure functions of per-token tensors.

Tokens of all sequences in a batch are flattened: every tensor here is [N] (one entry per trained
token) and `seq_ids` [N] says which sequence a token belongs to. A loss returns the per-token loss
[N]; the step reduces it with `token_weights` (each loss names its normalisation), which lets a
packed, chunked forward accumulate exactly the same gradient as one big batch.

Variants (`TrainConfig.loss` x `TrainConfig.importance_sampling_level`, one `LOSSES` entry each),
following TRL 1.16's GRPOTrainer:
- grpo: PPO-style clipped ratio, mean per sequence (trajectory), then over sequences.
- dr_grpo: the same clipped ratio, summed and divided by a constant (sequences x max tokens).
- dapo: the same clipped ratio, token-level mean over the batch.
- gspo: one ratio per sequence, exp(mean log-ratio), clipped; mean per sequence. Any clipped-ratio
  loss at importance level "sequence" uses this ratio and keeps its own normalisation.
- cispo: REINFORCE on logprobs weighted by the detached ratio capped at 1 + epsilon_high; token mean.

`policy_loss` is the one place where the pieces meet: per-token loss x truncated-IS weight + beta x KL,
weighted and summed. The GRPO step and the TRL cross-check (tests/train/test_trl_crosscheck.py) both call it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = [
    "LOSSES",
    "LossSpec",
    "PolicyLossTerms",
    "loss_spec",
    "policy_loss",
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
ImportanceLevel = Literal["token", "sequence"]


@dataclass(frozen=True)
class LossSpec:
    """A loss variant: its per-token loss and how the step normalises it (see `token_weights`)."""

    per_token: PerTokenLoss
    normalization: Normalization


LOSSES: dict[tuple[str, ImportanceLevel], LossSpec] = {
    ("grpo", "token"): LossSpec(clipped_ratio_loss, "sequence"),
    ("grpo", "sequence"): LossSpec(gspo_loss, "sequence"),
    ("dr_grpo", "token"): LossSpec(clipped_ratio_loss, "constant"),
    ("dr_grpo", "sequence"): LossSpec(gspo_loss, "constant"),
    ("dapo", "token"): LossSpec(clipped_ratio_loss, "token"),
    ("dapo", "sequence"): LossSpec(gspo_loss, "token"),
    ("gspo", "token"): LossSpec(gspo_loss, "sequence"),  # gspo is sequence-level whatever the setting
    ("gspo", "sequence"): LossSpec(gspo_loss, "sequence"),
    ("cispo", "token"): LossSpec(cispo_loss, "token"),
    ("cispo", "sequence"): LossSpec(cispo_loss, "token"),  # cispo's weight is per token by definition
}


def loss_spec(loss: str, importance_sampling_level: ImportanceLevel = "token") -> LossSpec:
    """The `LOSSES` entry for a `TrainConfig`'s `loss` and `importance_sampling_level`."""
    try:
        return LOSSES[(loss, importance_sampling_level)]
    except KeyError:
        names = sorted({name for name, _ in LOSSES})
        raise ValueError(
            f"unknown loss {loss!r} at importance level {importance_sampling_level!r}; losses: {names}, "
            "levels: 'token', 'sequence'"
        ) from None


@dataclass(frozen=True)
class PolicyLossTerms:
    loss: torch.Tensor  # [] the weighted sum: call .backward() on it
    kl: torch.Tensor | None  # [N] per-token k3 KL (detached), None without a reference


def policy_loss(
    spec: LossSpec,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    seq_ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    sampler_logp: torch.Tensor | None = None,
    tis_cap: float | None = None,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
) -> PolicyLossTerms:
    """sum_t weights_t * (loss_t * tis_t + beta * kl_t): the loss the GRPO step applies.

    logp, old_logp, adv, weights: [N]; seq_ids [N] numbers the sequences 0..S-1 (for sequence-level
    ratios). With `tis_cap`, each token's loss is weighted by min(exp(old_logp - sampler_logp), cap)
    (truncated importance sampling against the engine that sampled it). With `ref_logp`, the k3 KL to
    the reference (the base model) is added with weight `beta`.
    """
    loss_t = spec.per_token(logp, old_logp, adv, seq_ids, eps_low, eps_high)  # [N]
    if tis_cap is not None:
        if sampler_logp is None:
            raise ValueError("tis_cap needs sampler_logp, the sampling engine's logprobs")
        loss_t = loss_t * truncated_is_weights(old_logp, sampler_logp, tis_cap)  # [N]
    kl = None
    if ref_logp is not None:
        kl = kl_k3(logp, ref_logp)  # [N]
        loss_t = loss_t + beta * kl  # [N]
    return PolicyLossTerms((loss_t * weights).sum(), kl.detach() if kl is not None else None)
