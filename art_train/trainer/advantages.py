"""Group-relative advantages: each rollout's reward against the others of the same task."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from art_core import TrajectoryGroup

__all__ = ["GroupAdvantages", "group_advantages", "step_advantages"]


def group_advantages(rewards: torch.Tensor, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """Reward minus the group mean, divided by (the group's unbiased std + eps) when `scale`.

    rewards: [G] one group's rewards -> [G] advantages. Same formula and eps as TRL's GRPOTrainer.
    """
    centered = rewards - rewards.mean()  # [G]
    if not scale or rewards.numel() < 2:
        return centered
    return centered / (rewards.std() + eps)  # [G]


@dataclass(frozen=True)
class GroupAdvantages:
    index: int  # position of the group in the step
    advantages: list[float]  # one per trajectory of the group
    skipped: str | None = None  # why the group trains nothing, in words


def step_advantages(groups: list[TrajectoryGroup], scale: bool = True) -> list[GroupAdvantages]:
    """Advantages for every group of a step; a group whose rewards are all equal trains nothing and says so."""
    out: list[GroupAdvantages] = []
    for i, group in enumerate(groups):
        rewards = group.rewards()
        if len(rewards) < 2:
            out.append(
                GroupAdvantages(
                    i, [0.0] * len(rewards), f"group {i}: has {len(rewards)} trajectory, needs 2 or more"
                )
            )
            continue
        if max(rewards) == min(rewards):
            out.append(
                GroupAdvantages(
                    i, [0.0] * len(rewards), f"group {i}: all {len(rewards)} rewards were {rewards[0]:g}"
                )
            )
            continue
        adv = group_advantages(torch.tensor(rewards, dtype=torch.float64), scale)
        out.append(GroupAdvantages(i, [float(a) for a in adv]))
    return out
