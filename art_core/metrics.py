"""Summary metrics of trajectory groups, shared by `log` and `train`."""

from __future__ import annotations

import statistics
from typing import Any

from .trajectory import TrajectoryGroup


def group_metrics(groups: list[TrajectoryGroup]) -> dict[str, Any]:
    """Reward mean and std, counts, and the mean of every numeric trajectory and group metric."""
    trajs = [t for g in groups for t in g.trajectories]
    rewards = [t.reward for t in trajs]
    out: dict[str, Any] = {
        "groups": len(groups),
        "trajectories": len(trajs),
        "exceptions": sum(len(g.exceptions) for g in groups),
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
    }
    keys = sorted({k for t in trajs for k, v in t.metrics.items() if isinstance(v, (int, float))})
    for key in keys:
        values = [float(t.metrics[key]) for t in trajs if isinstance(t.metrics.get(key), (int, float))]
        out[f"metric/{key}"] = statistics.fmean(values)
    # group metrics (RULER's usage, or what `model.log(metrics=...)` logs): their mean over the groups
    group_keys = sorted({k for g in groups for k, v in g.metrics.items() if isinstance(v, (int, float))})
    for key in group_keys:
        values = [float(g.metrics[key]) for g in groups if isinstance(g.metrics.get(key), (int, float))]
        out[f"group/{key}"] = statistics.fmean(values)
    return out
