import asyncio

import pytest

import art_core as art


async def rollout(reward: float, delay: float = 0.0, fail: bool = False) -> art.Trajectory:
    await asyncio.sleep(delay)
    if fail:
        raise ValueError(f"rollout with reward {reward} failed")
    return art.Trajectory(messages=[{"role": "user", "content": str(reward)}], reward=reward)


async def test_order_is_kept_and_rollouts_run_concurrently():
    groups = [art.TrajectoryGroup(rollout(g * 10 + i, delay=0.05 * (3 - i)) for i in range(3)) for g in range(4)]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = await art.gather_trajectory_groups(groups, show_progress=False)
    assert loop.time() - t0 < 0.5  # 12 rollouts of up to 0.15 s each, run together
    assert [g.rewards() for g in out] == [[g * 10 + i for i in range(3)] for g in range(4)]


async def test_max_concurrency_bounds_running_rollouts():
    running = peak = 0

    async def tracked() -> art.Trajectory:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return art.Trajectory(messages=[])

    groups = [art.TrajectoryGroup(tracked() for _ in range(5)) for _ in range(4)]
    out = await art.gather_trajectory_groups(groups, max_concurrency=3, show_progress=False)
    assert peak == 3
    assert sum(len(g.trajectories) for g in out) == 20


async def test_exceptions_within_limit_are_recorded_on_their_group():
    groups = [
        art.TrajectoryGroup([rollout(1), rollout(2, fail=True)]),
        art.TrajectoryGroup([rollout(3), rollout(4)]),
    ]
    out = await art.gather_trajectory_groups(groups, max_exceptions=1, show_progress=False)
    assert out[0].rewards() == [1] and out[0].exceptions[0].type == "ValueError"
    assert "reward 2 failed" in out[0].exceptions[0].message
    assert out[1].rewards() == [3, 4] and out[1].exceptions == []


async def test_too_many_exceptions_raise_with_the_first_cause():
    groups = [art.TrajectoryGroup([rollout(1, fail=True), rollout(2, fail=True), rollout(3, delay=5)])]
    with pytest.raises(art.TooManyExceptions, match="more than max_exceptions=1") as info:
        await art.gather_trajectory_groups(groups, max_exceptions=1, show_progress=False)
    assert isinstance(info.value.__cause__, ValueError)


async def test_fractional_max_exceptions():
    groups = [art.TrajectoryGroup([rollout(i, fail=i < 2) for i in range(10)])]
    out = await art.gather_trajectory_groups(groups, max_exceptions=0.2, show_progress=False)
    assert len(out[0].trajectories) == 8 and len(out[0].exceptions) == 2


async def test_after_each_can_keep_drop_or_split():
    def after(group: art.TrajectoryGroup):
        first = group.trajectories[0].reward
        if first == 0:
            return None
        if first == 10:
            return [art.TrajectoryGroup([t]) for t in group.trajectories]
        return group

    async def async_after(group):
        await asyncio.sleep(0)
        return after(group)

    for fn in (after, async_after):
        groups = [art.TrajectoryGroup([rollout(b), rollout(b + 1)]) for b in (0, 10, 20)]
        out = await art.gather_trajectory_groups(groups, after_each=fn, show_progress=False)
        assert [g.rewards() for g in out] == [[10], [11], [20, 21]]


async def test_gather_trajectories_leaves_out_failures():
    out = await art.gather_trajectories(
        [rollout(1), rollout(2, fail=True), rollout(3)], max_exceptions=1, show_progress=False
    )
    assert [t.reward for t in out] == [1, 3]


def test_iterate_dataset_steps_epochs_and_resume():
    data = list(range(10))
    batches = list(art.iterate_dataset(data, groups_per_step=4, num_epochs=2, seed=7))
    assert [b.step for b in batches] == list(range(6))
    assert [len(b.items) for b in batches] == [4, 4, 2, 4, 4, 2]
    assert sorted(x for b in batches[:3] for x in b.items) == data
    assert [b.epoch for b in batches] == [0, 0, 0, 1, 1, 1]
    assert batches[0].items != batches[3].items or batches[1].items != batches[4].items  # reshuffled
    resumed = list(art.iterate_dataset(data, groups_per_step=4, num_epochs=2, seed=7, initial_step=4))
    assert [b.items for b in resumed] == [b.items for b in batches[4:]]
    assert list(art.iterate_dataset(data, groups_per_step=4, shuffle=False))[0].items == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="groups_per_step"):
        list(art.iterate_dataset(data, groups_per_step=0))


def test_retry_sync_backs_off_and_filters():
    calls = []

    @art.retry(max_attempts=3, delay=0.001, jitter=0, exceptions=(ConnectionError,))
    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("try again")
        return "ok"

    assert flaky() == "ok" and len(calls) == 3

    @art.retry(max_attempts=5, delay=0.001, exceptions=(ConnectionError,))
    def wrong():
        calls.append(2)
        raise KeyError("not retried")

    with pytest.raises(KeyError):
        wrong()
    assert calls.count(2) == 1


async def test_retry_async_gives_up_after_max_attempts():
    attempts = []

    @art.retry(max_attempts=3, delay=0.001, backoff=2, jitter=0, on_retry=lambda e, n: attempts.append(n))
    async def always():
        raise TimeoutError("slow")

    with pytest.raises(TimeoutError):
        await always()
    assert attempts == [1, 2]
