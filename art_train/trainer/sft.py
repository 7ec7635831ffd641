"""The SFT step: cross-entropy on every assistant turn (distillation, or a warm-up before RL).

tokenize (sampled ids kept where present, other assistant turns re-tokenized and trained) ->
batches of `batch_size` sequences -> per row: forward, token-mean loss over the batch, backward ->
clip -> AdamW step. Rows that start with the same prompt (a shared system prompt and tool specs) run
it once, forward and backward, as in the GRPO step (`Policy.row_groups`); on CPU their short rest runs
several rows a decoder call, right-padded (`Policy.row_chunks`). Same rows and optimizer as the GRPO step (`Policy`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from art_core import SFTConfig, Trajectory

from .packing import split_batches
from .policy import Policy, Progress
from .tokenize import Sequence, TokenizeStats, fit_length, tokenize_trajectory

__all__ = ["sft_step"]


def sft_step(policy: Policy, trajectories: list[Trajectory], config: SFTConfig, progress: Progress,
             *, trained: list[Sequence] | None = None) -> dict[str, Any]:
    """Train `policy` on the assistant turns of `trajectories`; returns the step's metrics (and, into
    `trained` if given, the sequences it trains)."""
    t0 = time.perf_counter()
    stats = TokenizeStats()
    sequences: list[Sequence] = []
    max_len = policy.max_len(config)
    for i, traj in enumerate(trajectories):
        for seq in tokenize_trajectory(
            traj, policy.tokenizer, policy.chat_template, stats=stats, train_unsampled=True
        ):
            seq.trajectory = len(sequences)  # one unit per sequence: batch_size counts sequences
            fitted = fit_length(seq, max_len, config.overlong, stats)
            if fitted is not None:
                sequences.append(fitted)
        progress({"phase": "tokenize", "done": i + 1, "total": len(trajectories)})
    if trained is not None:
        trained.extend(sequences)
    metrics: dict[str, Any] = {
        "sequences": len(sequences),
        **stats.metrics(),
        "time/tokenize_s": time.perf_counter() - t0,
    }
    t1 = time.perf_counter()
    packed = [policy.rows(b, config) for b in split_batches(sequences, config.batch_size)]
    total_rows = config.num_epochs * sum(len(policy.own_rows(rows, config)) for rows, _ in packed)
    work = policy.decoder.snapshot()
    done_rows, loss_sum, grad_sum, steps, trained_tokens = 0, 0.0, 0.0, 0, 0
    with policy.training():
        for epoch in range(config.num_epochs):
            for rows, seq_of_token in packed:
                n = len(seq_of_token)
                if n == 0:
                    continue
                batch_loss = 0.0
                for k, group_rows in policy.row_groups(rows, config):
                    prefix = policy.shared_prefix(group_rows[0].input_ids[:k]) if k else None
                    for chunk in policy.row_chunks(group_rows, k, config):  # short rows: several a decoder call
                        loss = -torch.cat([logp for logp, _ in policy.forward_rows(chunk, prefix)]).sum() / n  # token mean
                        loss.backward()
                        batch_loss += float(loss.detach())
                        done_rows += len(chunk)
                        progress({"phase": "forward_backward", "done": done_rows, "total": total_rows})
                    if prefix is not None:
                        prefix.backward()
                policy.pad(rows, config)  # FSDP: as many forwards and backwards as the busiest rank
                grad_sum += policy.optimizer_step(config.max_grad_norm)
                loss_sum += batch_loss
                steps += 1
                trained_tokens += n if epoch == 0 else 0
    loss_sum = policy.reduce({"loss": loss_sum})["loss"]  # over all ranks (each has its rows' share)
    metrics.update(
        {
            "loss": loss_sum / max(steps, 1),
            "grad_norm": grad_sum / max(steps, 1),
            "trained_tokens": trained_tokens,
            "optimizer_steps": steps,
            "time/forward_backward_s": time.perf_counter() - t1,
        }
    )
    metrics |= policy.work_since(work, trained_tokens, sum(len(rows) for rows, _ in packed))
    return metrics
