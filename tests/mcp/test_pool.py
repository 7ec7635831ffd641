"""ServerPool: per-rollout isolation, a shared process, the process bound, crashes that fail one rollout."""

from __future__ import annotations

import asyncio

import pytest

import art_mcp
from art_core import TooManyExceptions, Trajectory, TrajectoryGroup, capture, gather_trajectory_groups

from .conftest import alive

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)


async def _notes_seen(pool: art_mcp.ServerPool, title: str) -> list[str]:
    """One 'rollout': list the notes it can see, then add its own."""
    async with pool.session() as session:
        seen = (await session.call("list_notes")).structured["result"]
        await session.call("add_note", {"title": title, "body": "private"})
        return [n["title"] for n in seen]


async def test_per_rollout_isolation_has_no_state_leaks():
    async with art_mcp.ServerPool(
        art_mcp.bundled_server("notes"), isolation="per_rollout", max_processes=2
    ) as pool:
        seen = [await _notes_seen(pool, f"note {i}") for i in range(3)]
        assert pool.started == 3
    assert seen == [[], [], []]


async def test_shared_isolation_reuses_one_process():
    # the same stateful server shared: state carries over, which is what per_rollout prevents
    async with art_mcp.ServerPool(art_mcp.bundled_server("notes"), isolation="shared") as pool:
        seen = [await _notes_seen(pool, f"note {i}") for i in range(3)]
        assert pool.started == 1
    assert seen == [[], ["note 0"], ["note 0", "note 1"]]


async def test_process_bound_holds_under_concurrency(flaky):
    pool = art_mcp.ServerPool(flaky, isolation="per_rollout", max_processes=2)
    pids: list[int] = []
    live_seen: list[int] = []

    async def one() -> None:
        async with pool.session() as session:
            live_seen.append(pool.live)
            pids.append(int((await session.call("whoami")).text))
            await session.call("increment")
            assert (await session.call("increment")).text == "2"  # a fresh counter every rollout

    await asyncio.gather(*(one() for _ in range(5)))
    await pool.close()
    assert len(set(pids)) == 5
    assert pool.peak == 2 and max(live_seen) <= 2 and pool.live == 0
    assert not any(alive(p) for p in pids)


async def test_prewarm_keeps_spares_within_the_bound(flaky):
    async with art_mcp.ServerPool(flaky, max_processes=2, prewarm=1) as pool:
        await asyncio.sleep(0)  # let the spare start
        async with pool.session() as session:
            first = int((await session.call("whoami")).text)
        async with pool.session() as session:
            second = int((await session.call("whoami")).text)
        assert pool.peak <= 2
        spare_tasks = list(pool._spares)
    assert first != second
    assert pool.live == 0 and all(t.done() for t in spare_tasks)
    assert not alive(first) and not alive(second)
    with pytest.raises(ValueError, match="prewarm must be between 0 and max_processes"):
        art_mcp.ServerPool(flaky, max_processes=1, prewarm=2)
    with pytest.raises(ValueError, match="isolation must be"):
        art_mcp.ServerPool(flaky, isolation="global")  # type: ignore[arg-type]


async def test_crash_fails_only_that_rollout(flaky):
    pids: list[int] = []

    async def rollout(pool: art_mcp.ServerPool, crash: bool) -> Trajectory:
        async with pool.session() as session:
            with capture() as traj:
                pids.append(int((await session.call("whoami")).text))
                if crash:
                    await session.call("die")
                await session.call("echo", {"text": "done"})
            traj.reward = 1.0
            return traj

    async with art_mcp.ServerPool(flaky, max_processes=3) as pool:
        groups = await gather_trajectory_groups(
            [TrajectoryGroup(rollout(pool, crash=i == 1) for i in range(3))],
            max_exceptions=1,
            show_progress=False,
        )
    [group] = groups
    assert len(group.trajectories) == 2 and [e.type for e in group.exceptions] == ["ServerCrashed"]
    assert "stopped during a call to tool 'die'" in group.exceptions[0].message
    assert not any(alive(p) for p in pids)


async def test_shared_server_restarts_after_a_crash(flaky):
    async with art_mcp.ServerPool(flaky, isolation="shared") as pool:
        async with pool.session() as session:
            first = int((await session.call("whoami")).text)
            with pytest.raises(art_mcp.ServerCrashed):
                await session.call("die")
        async with pool.session() as session:
            second = int((await session.call("whoami")).text)
        assert pool.started == 2
    assert first != second and not alive(first) and not alive(second)


async def test_cancelled_rollouts_leave_no_process(flaky):
    # one rollout crashes, max_exceptions=0 stops the gather, which cancels the others mid tool call
    pids: list[int] = []
    ready = asyncio.Event()

    async def rollout(pool: art_mcp.ServerPool, crash: bool) -> Trajectory:
        async with pool.session() as session:
            pids.append(int((await session.call("whoami")).text))
            if len(pids) == 3:  # whichever rollout comes last, the crasher included
                ready.set()
            if crash:
                await ready.wait()
                await session.call("die")
            await session.call("hang", {"seconds": 20})
            return Trajectory()

    async with art_mcp.ServerPool(flaky, max_processes=3, timeout=60) as pool:
        with pytest.raises(TooManyExceptions, match="ServerCrashed"):
            await gather_trajectory_groups(
                [TrajectoryGroup(rollout(pool, crash=i == 0) for i in range(3))], show_progress=False
            )
    assert len(pids) == 3
    for _ in range(100):  # hung servers may need the SIGTERM escalation
        if not any(alive(p) for p in pids):
            break
        await asyncio.sleep(0.1)
    assert not any(alive(p) for p in pids)
