"""The GRPO step, top to bottom in one function.

advantages per group -> tokenize -> batches and rows -> old / reference logprobs when needed ->
per row (or chunk of short rows): forward, `policy_loss`, backward -> clip -> AdamW step -> metrics. Saving the checkpoint is
the caller's (`Trainer`), so this function only changes the weights and the optimizer state.

Where it departs from the papers (DeepSeekMath's GRPO, DAPO, Dr. GRPO, GSPO) and TRL 1.16's GRPOTrainer:
- No generation: rollouts arrive as trajectories, with the sampler's token ids spliced in; a turn
  without them is context (re-tokenized and trained only with `train_unsampled_turns`), and the step
  trains on the sampled tokens as they are.
- Sequences go one per row on CPU (packed rows on GPU), and the lm_head runs only on the trained
  tokens. Rollouts of one task share their prompt's forward and backward (`SharedPrefix`); on CPU their
  short rests run several to a decoder call, right-padded (`Policy.row_chunks`), the only padding.
- Off-policy samples (async mode) arrive already filtered by age (`off_policy.drop_stale`, in the
  `Trainer`); the kept ones get truncated importance sampling against the sampler by default.
- The "old" policy is the checkpoint the step starts from. With one optimizer step per call the
  ratio is exactly 1 (as in TRL) and no old logprobs are computed; they are when the weights move
  within the step (`num_epochs` x batches > 1).
- The KL reference (`beta` > 0) is the base model, i.e. the same weights with the adapter disabled,
  not a second copy; the estimator is k3, added per token as in TRL.
- By default every trajectory weighs the same in "sequence"-normalised losses (`trajectory_weight`),
  whatever its number of sequences; a group whose rewards are all equal trains nothing and says why.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from art_core import TrainConfig, TrajectoryGroup

from .advantages import step_advantages
from .losses import clip_fraction, loss_spec, policy_loss, token_weights
from .off_policy import is_cap
from .packing import Row, split_batches
from .policy import Policy, Progress
from .tokenize import Sequence, TokenizeStats, fit_length, tokenize_trajectory

__all__ = ["grpo_step"]

logger = logging.getLogger(__name__)


def chunk_seq_ids(chunk: list[Row]) -> torch.Tensor:
    """[n] each token's sequence in a chunk of rows: a row's own numbers, shifted past the rows before it."""
    ids, offset = [], 0
    for row in chunk:
        ids.append(row.seq_local + offset)
        offset += int(row.seq_local.max()) + 1 if row.seq_local.numel() else 0
    return torch.cat(ids)


def grpo_step(
    policy: Policy, groups: list[TrajectoryGroup], config: TrainConfig, progress: Progress,
    *, trained: list[Sequence] | None = None,
) -> dict[str, Any]:
    """Train `policy` on `groups` with GRPO (``config.loss`` picks the variant); returns the step's metrics.

    `progress` gets {"phase": "tokenize" | "forward_backward", "done": i, "total": n}. `trained`, if
    given, receives the sequences the step trains (the weight-sync probe reuses their ids).
    """
    # 1. advantages: each rollout's reward against its group's
    t0 = time.perf_counter()
    rewards = [r for g in groups for r in g.rewards()]
    advantages = step_advantages(groups, config.scale_rewards)
    skipped = [a.skipped for a in advantages if a.skipped]
    for reason in skipped:
        logger.info("%s: trains nothing", reason)
    trainable = [a for a in advantages if not a.skipped]

    # 2. tokenize: one or more sequences per trajectory, sampled ids spliced in, cut to max_len
    stats = TokenizeStats()
    sequences: list[Sequence] = []
    max_len = policy.max_len(config)
    n_traj = 0
    for done, g in enumerate(trainable):
        for trajectory, advantage in zip(groups[g.index].trajectories, g.advantages, strict=True):
            for seq in tokenize_trajectory(trajectory, policy.tokenizer, policy.chat_template, stats=stats,
                                           train_unsampled=config.train_unsampled_turns):
                seq.advantage, seq.trajectory = advantage, n_traj
                fitted = fit_length(seq, max_len, config.overlong, stats)
                if fitted is not None:
                    sequences.append(fitted)
            n_traj += 1
        progress({"phase": "tokenize", "done": done + 1, "total": len(trainable)})
    if trained is not None:
        trained.extend(sequences)
    if stats.counts["trajectories_without_trained_tokens"]:
        logger.warning(
            "%d of %d trajectories have no sampled assistant turn, so nothing of them is trained (turns without "
            "token ids are context; TrainConfig(train_unsampled_turns=True) re-tokenizes and trains them)",
            stats.counts["trajectories_without_trained_tokens"], n_traj,
        )
    metrics: dict[str, Any] = {
        "groups_submitted": len(groups),
        "groups_trainable": len(trainable),
        "skipped_groups": skipped,
        "reward_mean": float(torch.tensor(rewards).mean()) if rewards else 0.0,
        "reward_std": float(torch.tensor(rewards).std()) if len(rewards) > 1 else 0.0,
        "sequences": len(sequences),
        "prefix_preserving": policy.prefix_preserving,
        **stats.metrics(),
        "time/tokenize_s": time.perf_counter() - t0,
    }

    # 3. batches (one optimizer step each) and their rows
    t1 = time.perf_counter()
    spec = loss_spec(config.loss, config.importance_sampling_level)
    eps_low = config.epsilon
    eps_high = config.epsilon if config.epsilon_high is None else config.epsilon_high
    tis_cap = is_cap(config)  # async mode corrects off-policy samples by default (see off_policy)
    batches = split_batches(sequences, config.batch_size)
    packed = [policy.rows(b, config) for b in batches]

    # 4. old logprobs only when the weights move within the step; reference logprobs only with a KL term
    work = policy.decoder.snapshot()  # from here every decoder call counts in `work/*`
    multi_step = config.num_epochs * len(batches) > 1
    own = [policy.own_rows(rows, config) for rows, _ in packed]  # all rows on 1 rank; this rank's share on several
    old = [policy.logprobs(rows, len(sot), config, adapter=True) if multi_step else None for rows, sot in packed]
    ref = [policy.logprobs(rows, len(sot), config, adapter=False) if config.beta > 0 else None for rows, sot in packed]

    # 5. per row: forward, loss, backward; per batch: clip and step
    total_rows = config.num_epochs * sum(len(rows) for rows in own)
    sums = {"loss": 0.0, "entropy": 0.0, "kl": 0.0, "clip": 0.0, "grad_norm": 0.0, "tokens": 0, "steps": 0}
    drift = {"sum": 0.0, "max": 0.0, "tokens": 0}  # |sampler - trainer| logprob on trained tokens, step's start
    done_rows = trained_tokens = 0
    with policy.training():
        for epoch in range(config.num_epochs):
            for b, (batch, (rows, seq_of_token)) in enumerate(zip(batches, packed, strict=True)):
                if len(seq_of_token) == 0:
                    continue  # nothing trained in this batch: no optimizer step
                adv = torch.tensor([batch[s].advantage for s in seq_of_token.tolist()], dtype=torch.float32)  # [N]
                sampler = torch.tensor(  # [N] the engine's logprobs, NaN where unknown
                    [lp for s in batch for lp, m in zip(s.sampler_logprobs[1:], s.mask[1:], strict=True) if m],
                    dtype=torch.float32,
                )
                traj = torch.tensor([batch[s].trajectory for s in seq_of_token.tolist()])  # [N]
                unit = torch.unique(traj, return_inverse=True)[1] if config.trajectory_weight == "equal" else (
                    torch.zeros_like(traj))
                weights = token_weights(seq_of_token, unit, spec.normalization, max_len)  # [N]
                old_b, ref_b = old[b], ref[b]  # [N] or None
                batch_loss = 0.0
                for k, group_rows in policy.row_groups(rows, config):
                    prefix = policy.shared_prefix(group_rows[0].input_ids[:k]) if k else None
                    for chunk in policy.row_chunks(group_rows, k, config):  # short rows: several a decoder call
                        outs = policy.forward_rows(chunk, prefix)
                        idx = torch.cat([row.token_index for row in chunk])  # [n] the chunk's tokens in the flat arrays
                        logp = torch.cat([lp for lp, _ in outs])  # [n]
                        entropy = torch.cat([e for _, e in outs])  # [n]
                        dev = logp.device
                        seq_ids = chunk_seq_ids(chunk).to(dev)  # [n] the chunk's sequences, numbered apart
                        a = adv[idx].to(dev)
                        old_logp = old_b[idx].to(dev) if old_b is not None else logp.detach()
                        terms = policy_loss(
                            spec, logp, old_logp, a, seq_ids, weights[idx].to(dev),
                            eps_low=eps_low, eps_high=eps_high,
                            sampler_logp=sampler[idx].to(dev), tis_cap=tis_cap,
                            ref_logp=ref_b[idx].to(dev) if ref_b is not None else None, beta=config.beta,
                        )
                        if epoch == 0:  # old_logp is the policy the step started from
                            gap = (sampler[idx].to(dev) - old_logp.detach()).abs()
                            gap = gap[~torch.isnan(gap)]
                            if gap.numel():
                                drift["sum"] += float(gap.sum())
                                drift["max"] = max(drift["max"], float(gap.max()))
                                drift["tokens"] += gap.numel()
                        terms.loss.backward()
                        batch_loss += float(terms.loss.detach())
                        sums["kl"] += float(terms.kl.sum()) if terms.kl is not None else 0.0
                        sums["entropy"] += float(entropy.sum())
                        sums["clip"] += float(clip_fraction(logp, old_logp, a, eps_low, eps_high)) * len(idx)
                        sums["tokens"] += len(idx)
                        done_rows += len(chunk)
                        progress({"phase": "forward_backward", "done": done_rows, "total": total_rows})
                    if prefix is not None:
                        prefix.backward()
                policy.pad(rows, config)  # FSDP: as many forwards and backwards as the busiest rank
                trained_tokens += len(seq_of_token) if epoch == 0 else 0
                sums["grad_norm"] += policy.optimizer_step(config.max_grad_norm)
                sums["loss"] += batch_loss
                sums["steps"] += 1

    # 6. metrics: per optimizer step (loss, grad norm) and per token (entropy, KL, clipping), over all ranks
    sums |= policy.reduce({k: sums[k] for k in ("loss", "entropy", "kl", "clip", "tokens")})  # grad_norm: the same
    drift = (policy.reduce({"sum": drift["sum"], "tokens": drift["tokens"]})
             | policy.reduce({"max": drift["max"]}, "max"))
    steps, tokens = max(sums["steps"], 1), max(sums["tokens"], 1)
    metrics.update({
        "loss": sums["loss"] / steps,
        "entropy": sums["entropy"] / tokens,
        "kl": sums["kl"] / tokens,
        "clip_fraction": sums["clip"] / tokens,
        "grad_norm": sums["grad_norm"] / steps,
        "trained_tokens": trained_tokens,
        "optimizer_steps": sums["steps"],
        "rows": sum(len(rows) for rows, _ in packed),
        "time/forward_backward_s": time.perf_counter() - t1,
    })
    metrics |= policy.work_since(work, trained_tokens, metrics["rows"])
    if drift["tokens"]:  # how far the sampler's logprobs are from the trainer's: a stale engine shows here
        mean = drift["sum"] / drift["tokens"]
        metrics |= {"sampler_drift/mean_abs": mean, "sampler_drift/max_abs": drift["max"],
                    "sampler_drift/tokens": drift["tokens"]}  # the service warns when it is high for the engine
    if trained_tokens:
        metrics["trained_tokens_per_s"] = trained_tokens / metrics["time/forward_backward_s"]
    return metrics
