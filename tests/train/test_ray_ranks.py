"""The trainer on 2 ranks where rank 1 is a Ray actor (`ray_ranks.RayRanks`, a local Ray): the same adapter as
1 rank, a killed actor fails the step cleanly, as a killed child-process rank does (test_distributed.py), and
one killed between steps is started again before the next; with the base sharded, the actor takes its shard
from rank 0."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import art_core as art
from art_train.trainer import Trainer
from art_train.trainer.distributed import RankFailedError, Ranks
from tests.train.test_distributed import LR, TOLERANCE, _groups, _lora, _max_diff, _model

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def ray_ranks(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A 1-rank trainer and a 2-rank one whose rank 1 is a Ray actor; Ray and the ranks stopped after."""
    from art_train.trainer.ray_ranks import RayRanks

    ours = not ray.is_initialized()
    if ours:
        ray.init(num_cpus=2, include_dashboard=False)
    ranks = Ranks(2, "cpu", timeout_s=120, launcher=RayRanks({"num_cpus": 1}))
    one = Trainer(_model(tiny_model_path, "one"), art.RunDir("ranks", "one", tmp_path_factory.mktemp("one")),
                  device="cpu")
    two = Trainer(_model(tiny_model_path, "two"), art.RunDir("ranks", "two", tmp_path_factory.mktemp("two")),
                  device="cpu", ranks=ranks)
    try:
        yield one, two, ranks
    finally:
        ranks.stop()
        if ours:
            ray.shutdown()


def test_a_ray_actor_rank_trains_the_same_adapter_as_one_rank(ray_ranks: Any) -> None:
    one, two, ranks = ray_ranks
    groups = _groups(one)
    config = art.TrainConfig(learning_rate=LR, beta=0.05)  # one optimizer step, with reference logprobs
    a, b = one.train(groups, config), two.train(groups, config)
    assert b.metrics["loss"] == pytest.approx(a.metrics["loss"], rel=1e-5, abs=1e-7)
    assert b.metrics["rows"] == a.metrics["rows"]
    (rank,) = ranks.processes
    assert rank.node_id == ray.get_runtime_context().get_node_id()  # a local Ray: one node
    assert ranks.pids() == [rank.pid] and rank.wait(0) is None  # the actor waits for the next step
    assert max(float(v.abs().max()) for v in _lora(one).values()) > 10 * TOLERANCE  # the weights did move
    assert _max_diff(_lora(one), _lora(two)) < TOLERANCE


def test_a_killed_rank_actor_fails_the_step_and_the_next_step_starts_a_new_one(ray_ranks: Any) -> None:
    one, two, ranks = ray_ranks
    groups = _groups(two)
    config = art.TrainConfig(learning_rate=LR)
    step, weights = two.step, _lora(two)
    (victim,) = ranks.processes

    fired: list[int] = []

    def kill_rank_1(event: dict[str, Any]) -> None:  # at the first rows trained (a chunk of rows may count several)
        if event["phase"] == "forward_backward" and not fired:
            fired.append(event["done"])
            ray.kill(victim.actor)

    t0 = time.perf_counter()
    with pytest.raises(RankFailedError, match=r"step \d+ failed on the trainer's ranks.*start again"):
        two.train(groups, config, progress=kill_rank_1)
    assert time.perf_counter() - t0 < 30  # no hang until the group's timeout
    assert victim.wait(10) == "died with its Ray actor (ActorDiedError)"
    assert two.step == step and _max_diff(_lora(two), weights) == 0  # rolled back
    assert not ranks.running

    result = two.train(groups, config)  # a new actor, from the newest checkpoint
    assert result.step == step + 1 and ranks.running and ranks.processes[0].actor != victim.actor
    assert one.train(groups, config).step == result.step
    assert _max_diff(_lora(one), _lora(two)) < TOLERANCE


def test_a_rank_actor_killed_between_steps_is_started_again_before_the_next(ray_ranks: Any) -> None:
    _, two, ranks = ray_ranks
    groups = _groups(two)
    config = art.TrainConfig(learning_rate=LR)
    (victim,) = ranks.processes
    ray.kill(victim.actor)
    assert victim.wait(10) == "died with its Ray actor (ActorDiedError)"  # rank 0 sees it before the step

    step = two.step
    assert two.train(groups, config).step == step + 1  # the step starts a new actor first: nothing fails
    assert ranks.running and ranks.processes[0].actor != victim.actor


def test_a_ray_actor_rank_takes_its_shard_of_the_base_from_rank_0(ray_ranks: Any, tiny_model_path: Path,
                                                                   tmp_path: Path) -> None:
    """`train_shard="fsdp"` with rank 1 a Ray actor: it builds the base empty and receives its half from rank 0
    (as a child-process rank does, test_fsdp.py), and trains the 1-rank adapter."""
    from art_train.trainer.fsdp import base_bytes
    from art_train.trainer.ray_ranks import RayRanks

    _, _, plain = ray_ranks
    plain.stop()  # one process group per process: this test's ranks replace the module's
    one = Trainer(_model(tiny_model_path, "one"), art.RunDir("ranks", "one", tmp_path / "one"), device="cpu")
    ranks = Ranks(2, "cpu", timeout_s=120, launcher=RayRanks({"num_cpus": 1}), shard="fsdp")
    try:
        two = Trainer(_model(tiny_model_path, "two"), art.RunDir("ranks", "two", tmp_path / "two"), device="cpu",
                      ranks=ranks)
        assert ranks.running and two.policy.root is not None  # the actor started and the base sharded already
        held, whole = base_bytes(two.policy.root)
        assert 0.45 * whole <= held <= 0.55 * whole, (held, whole)
        groups = _groups(one)
        config = art.TrainConfig(learning_rate=LR)
        a, b = one.train(groups, config), two.train(groups, config)
        assert b.metrics["loss"] == pytest.approx(a.metrics["loss"], rel=1e-5, abs=1e-7)
        assert _max_diff(_lora(one), _lora(two)) < TOLERANCE
    finally:
        ranks.stop()
