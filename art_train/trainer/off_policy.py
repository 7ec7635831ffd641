"""Off-policy samples in asynchronous mode: each sample's age, the staleness bound, the IS cap.

A sample's age is the checkpoint the step starts from minus the step that sampled it (the ``step``
of its `Sample`, recorded by the server): 0 on-policy, 1 when it was sampled while the previous step
trained. A sample older than `max_steps_off_policy` is dropped: its turn stays in the sequence as
context (it is not trained); a trajectory left with no trained turn leaves its group, so the group's
advantages are computed over what is trained. The kept samples are corrected by truncated importance
sampling against the sampler's logprobs (`losses.truncated_is_weights`): each token's loss is
weighted by min(exp(logp_trainer_old - logp_sampler), C).

Samples without a step (from another server) count as on-policy. Synchronous mode (the default)
drops nothing unless `max_steps_off_policy` is set, and corrects nothing unless
`truncated_importance_sampling` is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from art_core import TrainConfig, Trajectory, TrajectoryGroup
from art_core.trajectory import SAMPLE_KEY

__all__ = ["ASYNC_IS_CAP", "ASYNC_MAX_STEPS_OFF_POLICY", "OffPolicy", "drop_stale", "is_cap", "max_age"]

ASYNC_MAX_STEPS_OFF_POLICY = 1  # `max_steps_off_policy` when async mode leaves it unset
ASYNC_IS_CAP = 2.0  # `truncated_importance_sampling` when async mode leaves it unset


def max_age(config: TrainConfig) -> int | None:
    """The staleness bound this step applies (None: no bound)."""
    if config.max_steps_off_policy is not None:
        return config.max_steps_off_policy
    return ASYNC_MAX_STEPS_OFF_POLICY if config.mode == "async" else None


def is_cap(config: TrainConfig) -> float | None:
    """The truncated-IS cap this step applies (None: no correction)."""
    if config.truncated_importance_sampling is not None:
        return config.truncated_importance_sampling
    return ASYNC_IS_CAP if config.mode == "async" else None


@dataclass
class OffPolicy:
    """The ages of a step's samples and how many were dropped; `metrics` names them as the step reports them."""

    ages: list[int]
    dropped: int

    def metrics(self) -> dict[str, float]:
        return {"off_policy/age_mean": sum(self.ages) / len(self.ages) if self.ages else 0.0,
                "off_policy/age_max": float(max(self.ages, default=0)),
                "off_policy/dropped": float(self.dropped)}


def drop_stale(groups: list[TrajectoryGroup], start_step: int, bound: int | None) -> tuple[list[TrajectoryGroup], OffPolicy]:
    """`groups` without the samples older than `bound` (copies where anything changed; the input is not
    touched) and the ages of every sample, dropped ones included."""
    ages: list[int] = []
    dropped = 0
    out: list[TrajectoryGroup] = []
    for group in groups:
        kept: list[Trajectory] = []
        changed = False
        for traj in group.trajectories:
            stale: list[tuple[int, int]] = []  # (history, turn) of the samples to drop
            sampled = 0
            for h, history in enumerate(traj.histories()):
                for i, sample in history.samples():
                    sampled += 1
                    age = start_step - sample.step if sample.step is not None else 0
                    ages.append(age)
                    if bound is not None and age > bound:
                        stale.append((h, i))
            if not stale:
                kept.append(traj)
                continue
            changed = True
            dropped += len(stale)
            if len(stale) < sampled:
                kept.append(_without_samples(traj, stale))
        out.append(group.model_copy(update={"trajectories": kept}) if changed else group)
    return out, OffPolicy(ages=ages, dropped=dropped)


def _without_samples(traj: Trajectory, turns: list[tuple[int, int]]) -> Trajectory:
    """A copy of `traj` whose listed turns carry no sample (so they are context, not trained)."""
    copy = traj.model_copy(deep=True)
    histories: list[Any] = [copy.turns, *(h.turns for h in copy.additional_histories)]
    for h, i in turns:
        histories[h][i] = {k: v for k, v in histories[h][i].items() if k != SAMPLE_KEY}
    return copy
