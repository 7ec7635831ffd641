"""Per-node credit: train each graph node (or agent) on its own reward.

A node is named as `trainable_nodes` names it: a node (``writer``), an agent of a multi-agent graph
(``weather_agent``), or a path (``weather_agent/agent``); see `art_graph.handler.node_matches`.

A group of rollouts with per-node rewards becomes one group per node. In each, only that node's
turns keep their samples (the rest is context) and every trajectory's reward is the node's reward,
so GRPO compares the node's work across the rollouts of a task on the node's own score.
"""

from __future__ import annotations

from collections.abc import Iterable

from art_core import Trajectory, TrajectoryGroup
from art_core.trajectory import SAMPLE_KEY, History

from .handler import node_matches

__all__ = ["keep_nodes", "node_groups"]


def keep_nodes(trajectory: Trajectory, nodes: Iterable[str]) -> Trajectory:
    """A copy of ``trajectory`` whose turns from other nodes (or agents, or paths) are context."""
    keep = set(nodes)
    copy = trajectory.model_copy(deep=True)
    for history in [copy, *copy.additional_histories]:
        history.turns = [_keep(m, keep) for m in history.turns]
    return copy


def _keep(message: dict, keep: set[str]) -> dict:
    sample = message.get(SAMPLE_KEY)
    path = sample.get("node") if sample is not None else None
    if sample is None or (path is not None and any(node_matches(n, path) for n in keep)):
        return message
    return {k: v for k, v in message.items() if k != SAMPLE_KEY}


def _has_samples(trajectory: Trajectory, node: str) -> bool:
    histories: list[History] = [trajectory, *trajectory.additional_histories]
    return any(s.node is not None and node_matches(node, s.node) for h in histories for _, s in h.samples())


def node_groups(
    groups: Iterable[TrajectoryGroup], nodes: Iterable[str] | None = None
) -> list[TrajectoryGroup]:
    """Split groups into one group per node, each rewarded with ``metadata["node_rewards"][node]``.

    ``nodes`` defaults to every node that has per-node rewards in the group. A trajectory without a
    reward for a node keeps its overall reward. Groups in which the node made no trainable turn are
    left out.

    Example:
        groups = await art.gather_trajectory_groups(...)
        await model.train(art_graph.node_groups(groups))
    """
    out: list[TrajectoryGroup] = []
    for group in groups:
        if group.pending:
            raise ValueError(
                f"a group still has {group.pending} unfinished rollouts; gather it before node_groups()"
            )
        wanted = (
            list(nodes)
            if nodes is not None
            else sorted({n for t in group.trajectories for n in t.metadata.get("node_rewards", {})})
        )
        for node in wanted:
            if not any(_has_samples(t, node) for t in group.trajectories):
                continue
            trajectories = []
            for t in group.trajectories:
                copy = keep_nodes(t, {node})
                copy.reward = t.metadata.get("node_rewards", {}).get(node, t.reward)
                trajectories.append(copy)
            metadata = {**group.metadata, "node": node}
            out.append(TrajectoryGroup(trajectories, metadata=metadata, exceptions=list(group.exceptions)))
    return out
