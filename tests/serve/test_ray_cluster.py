"""The cluster in miniature (issue 39, item 5): a Ray cluster of two nodes on this machine, the tiny model,
two engine replicas as Ray actors (one on each node) and two trainer ranks, rank 0 in this process (the head
node) and rank 1 a Ray actor on the second node, behind one `LocalBackend`.

Rollouts run as Ray tasks against the endpoint; two async steps train. Then one replica's worker process
is killed with SIGKILL while rollouts are in flight: no rollout is lost, the next step completes, and the
replica comes back on its node with the current step loaded and verified. Last, killing a replica's actor
kills its worker process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import art_core as art
from art_train import BackendConfig, LocalBackend

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]

GROUPS, PER_GROUP = 2, 3


@pytest.fixture
def cluster() -> Iterator[Any]:
    """Two Ray nodes, one CPU each; each offers one `replica_slot`, so one replica lands on each node, and the
    second a `trainer_slot`, so trainer rank 1 lands there."""
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"replica_slot": 1}})
    c.add_node(num_cpus=1, resources={"replica_slot": 1, "trainer_slot": 1})
    ray.init(address=c.address)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


async def rollout(model: art.Model, i: int) -> art.Trajectory:
    """Module level: a Ray task finds it by name. Long enough replies that a kill lands mid-rollout."""
    client = model.openai_client(max_retries=0)
    with art.capture() as traj:
        r = await client.chat.completions.create(model=model.name, messages=[{"role": "user", "content": f"q{i}"}],
                                                 max_tokens=24, seed=i, extra_body={"ignore_eos": True})
    traj.reward = float(i % 3)
    assert len(r.choices[0].model_extra["token_ids"]) == 24  # a full reply, not a truncated one
    return traj


def _groups(model: art.Model, offset: int) -> list[art.TrajectoryGroup]:
    return [art.TrajectoryGroup(rollout(model, offset + PER_GROUP * g + i) for i in range(PER_GROUP))
            for g in range(GROUPS)]


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


async def test_two_node_ray_cluster_trains_async_and_survives_a_replica_sigkill(
    cluster: Any, tiny_model_path: Path, tmp_path: Path
) -> None:
    config = BackendConfig(path=tmp_path, device="cpu", replicas=2, replica_launcher="ray", train_procs=2,
                           replica_ray_options={"num_cpus": 0, "resources": {"replica_slot": 1}},
                           train_launcher="ray", train_ray_options={"num_cpus": 0, "resources": {"trainer_slot": 1}},
                           sync_probe_tokens=64)
    backend = LocalBackend(config=config)
    model = art.TrainableModel(name="r", project="t", base_model=str(tiny_model_path),
                               config=art.ModelConfig(max_seq_len=512))
    train = art.TrainConfig(learning_rate=5e-2, mode="async")
    try:
        await model.register(backend)
        (replicas,) = backend.service.replica_sets()
        nodes = [r.engine.node_id for r in replicas.replicas]  # type: ignore[union-attr]
        assert len(set(nodes)) == 2, nodes  # one replica on each node
        assert {n["NodeID"] for n in ray.nodes() if n["Alive"]} == set(nodes)

        for step in (1, 2):  # rollouts as Ray tasks through the one endpoint, then an async step
            groups = await art.gather_trajectory_groups(_groups(model, 10 * step), executor="ray",
                                                        show_progress=False)
            assert [len(g.trajectories) for g in groups] == [PER_GROUP] * GROUPS
            result = await model.train(groups, config=train, verbose=False)
            assert result.step == step
            assert result.metrics["weight_sync/replica_0/ok"] == result.metrics["weight_sync/replica_1/ok"] == 1.0
        assert all(r.served > 0 for r in replicas.replicas), replicas.describe()
        (rank_1,) = backend.service._ranks.processes  # trainer rank 1: an actor on the node that is not this one's
        here = ray.get_runtime_context().get_node_id()
        assert rank_1.node_id in nodes and rank_1.node_id != here, (rank_1.node_id, here)

        # SIGKILL one replica's worker while rollouts are in flight
        victim = replicas.replicas[1]
        pid, node = victim.engine.pid, victim.engine.node_id  # type: ignore[union-attr]
        gather = asyncio.ensure_future(art.gather_trajectory_groups(_groups(model, 100), executor="ray",
                                                                    show_progress=False))
        deadline = time.monotonic() + 60
        while victim.inflight == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert victim.inflight > 0, replicas.describe()
        os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
        groups = await gather
        assert [len(g.trajectories) for g in groups] == [PER_GROUP] * GROUPS  # 0 rollouts lost
        assert victim.failures == 1

        deadline = time.monotonic() + 120
        while not victim.up and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert victim.up and victim.restarts == 1, replicas.describe()
        assert victim.engine.pid != pid and victim.engine.node_id == node  # type: ignore[union-attr]
        assert victim.adapters >= {"r@2"}  # loaded and verified again before it serves

        result = await model.train(groups, config=train, verbose=False)
        assert result.step == 3
        assert result.metrics["weight_sync/replica_0/ok"] == result.metrics["weight_sync/replica_1/ok"] == 1.0
        lines = httpx.get(f"{backend.url}/metrics").text.splitlines()
        restarts = [x for x in lines if x.startswith("art_replica_restarts_total{") and 'replica="1"' in x]
        assert len(restarts) == 1 and restarts[0].endswith(" 1.0"), lines

        # killing a replica's actor kills its worker process too
        other = replicas.replicas[0].engine
        ray.kill(other.actor)  # type: ignore[union-attr]
        deadline = time.monotonic() + 15
        while _running(other.pid) and time.monotonic() < deadline:  # type: ignore[union-attr]
            await asyncio.sleep(0.2)
        assert not _running(other.pid)  # type: ignore[union-attr]
    finally:
        await backend.close()
