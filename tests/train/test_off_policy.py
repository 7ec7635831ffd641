"""Async mode's trainer side: sample ages, the staleness bound, importance-sampling correction."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import art_core as art
from art_train.trainer import Trainer, step_advantages, tokenize_trajectory
from art_train.trainer.off_policy import drop_stale
from art_train.trainer.tokenize import TokenizeStats


def _traj(trainer: Trainer, text: str, reward: float, step: int | None, logprobs: list[float] | None = None,
          prompt: str = "q") -> art.Trajectory:
    tok = trainer.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    traj = art.Trajectory(messages=[{"role": "user", "content": prompt}], reward=reward)
    traj.turns.append(art.assistant_turn(text, token_ids=ids, logprobs=logprobs or [-1.5] * len(ids), step=step))
    return traj


@pytest.fixture
def trainer(tiny_model_path: Path, tmp_path: Path) -> Trainer:
    model = art.TrainableModel(name="off", project="t", base_model=str(tiny_model_path))
    return Trainer(model, art.RunDir("t", "off", root=tmp_path), device="cpu")


def test_drop_stale_strips_old_samples_and_counts_them(trainer: Trainer) -> None:
    mixed = _traj(trainer, "one", 1.0, step=2)
    mixed.turns += [{"role": "user", "content": "again"}]
    mixed.turns.append(art.assistant_turn("two", token_ids=[5, 6], step=0))  # age 3: dropped, the turn stays
    old = _traj(trainer, "old", 0.0, step=1)  # age 2: dropped, nothing left to train: leaves the group
    fresh = _traj(trainer, "new", 0.5, step=3)  # age 0
    groups = [art.TrajectoryGroup([mixed, old, fresh])]
    out, off = drop_stale(groups, start_step=3, bound=1)
    assert sorted(off.ages) == [0, 1, 2, 3] and off.dropped == 2
    assert off.metrics() == {"off_policy/age_mean": 1.5, "off_policy/age_max": 3.0, "off_policy/dropped": 2.0}
    kept = out[0].trajectories
    assert [t.reward for t in kept] == [1.0, 0.5]
    assert [i for i, _ in kept[0].samples()] == [1] and kept[0].turns[3]["content"] == "two"
    assert len(list(groups[0].trajectories[0].samples())) == 2  # the caller's groups are untouched
    assert drop_stale(groups, start_step=3, bound=None)[1].dropped == 0


def test_the_staleness_bound_drops_and_counts_samples_in_a_step(trainer: Trainer) -> None:
    trainer.train([art.TrajectoryGroup([_traj(trainer, "yes", 1.0, 0), _traj(trainer, "no", 0.0, 0)])],
                  art.TrainConfig(learning_rate=1e-2))
    assert trainer.step == 1
    stale = art.TrajectoryGroup([_traj(trainer, "alpha beta", 1.0, 0, prompt="s"),
                                 _traj(trainer, "gamma", 0.0, 0, prompt="s")])  # age 1 at step 2's start
    fresh = art.TrajectoryGroup([_traj(trainer, "delta", 1.0, 1, prompt="f"), _traj(trainer, "eta", 0.0, 1, prompt="f"),
                                 _traj(trainer, "epsilon zeta", 0.5, 0, prompt="f")])  # ages 0, 0, 1

    def tokens(*texts: str) -> int:
        return sum(len(trainer.tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in texts)

    config = art.TrainConfig(learning_rate=1e-2, mode="async", max_steps_off_policy=0)
    m = trainer.train([stale, fresh], config).metrics
    assert m["off_policy/dropped"] == 3 and m["off_policy/age_max"] == 1 and m["off_policy/age_mean"] == 0.6
    assert m["trained_tokens"] == tokens("delta", "eta")  # ignoring the bound would train all five
    assert m["groups_trainable"] == 1
    # at step 3's start the same samples are one step older; async mode's default bound is 1
    m = trainer.train([stale, fresh], art.TrainConfig(learning_rate=1e-2, mode="async")).metrics
    assert m["off_policy/dropped"] == 3 and m["off_policy/age_max"] == 2
    assert m["trained_tokens"] == tokens("delta", "eta")
    # synchronous mode (the default) drops nothing and reports no off-policy metrics, as before
    m = trainer.train([stale, fresh], art.TrainConfig(learning_rate=1e-2)).metrics
    assert "off_policy/dropped" not in m and m["trained_tokens"] == tokens("alpha beta", "gamma", "delta", "eta",
                                                                             "epsilon zeta")


def test_is_correction_weights_each_off_policy_sample_as_computed_by_hand(trainer: Trainer) -> None:
    trainer.train([art.TrajectoryGroup([_traj(trainer, "yes", 1.0, 0), _traj(trainer, "no", 0.0, 0)])],
                  art.TrainConfig(learning_rate=1e-2))
    # two samples from step 0, one step old at step 2's start; the sampler's logprobs are the trainer's
    # minus delta, so each token's IS weight is min(exp(delta), C) with C = 2 (the async default)
    deltas = {"good answer": math.log(1.5), "bad": math.log(3.0)}  # weights 1.5 and min(3, 2) = 2
    trajs = []
    for (text, delta), reward in zip(deltas.items(), (1.0, 0.0), strict=True):
        traj = _traj(trainer, text, reward, 0)
        (seq,) = tokenize_trajectory(traj, trainer.tokenizer, trainer.chat_template, stats=TokenizeStats())
        logp = trainer.sequence_logprobs(seq.token_ids)  # positions 1..n-1 under the current checkpoint
        trained = [logp[i - 1] for i, m in enumerate(seq.mask) if m]
        assert len(trained) == len(traj.turns[1]["sample"]["token_ids"])
        traj.turns[1]["sample"]["logprobs"] = [lp - delta for lp in trained]
        trajs.append(traj)
    group = art.TrajectoryGroup(trajs)
    (adv,) = step_advantages([group], True)
    a_good, a_bad = adv.advantages
    # grpo: -A * ratio * w per token, ratio 1 (one optimizer step), each trajectory's tokens averaged and the
    # two trajectories averaged: loss = -(A_good * 1.5 + A_bad * 2) / 2
    expected = -(a_good * 1.5 + a_bad * 2.0) / 2
    result = trainer.train([group], art.TrainConfig(learning_rate=1e-2, mode="async"))
    assert result.metrics["off_policy/age_max"] == 1 and result.metrics["off_policy/dropped"] == 0
    assert result.metrics["loss"] == pytest.approx(expected, abs=1e-4)
    assert abs(expected) > 0.1  # uncorrected, the loss would be -(A_good + A_bad) / 2 = 0
    assert -(a_good + a_bad) / 2 == pytest.approx(0.0, abs=1e-6)
    assert torch.isfinite(torch.tensor(result.metrics["grad_norm"]))
