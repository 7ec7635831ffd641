"""Losses, advantages and weights on hand-made tensors; expected numbers worked out in comments."""

from __future__ import annotations

import math

import pytest
import torch

from art_core import Trajectory, TrajectoryGroup
from art_train.trainer import (
    LOSSES,
    cispo_loss,
    clip_fraction,
    clipped_ratio_loss,
    group_advantages,
    gspo_loss,
    kl_k3,
    loss_spec,
    policy_loss,
    step_advantages,
    token_weights,
    truncated_is_weights,
)

LN = math.log


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def test_clipped_ratio_loss_by_hand() -> None:
    # ratios 1.5, 1.5, 0.5, 0.5 (old_logp = 0); eps 0.2 -> clip range [0.8, 1.2]
    logp = t(LN(1.5), LN(1.5), LN(0.5), LN(0.5))
    adv = t(1, -1, 1, -1)
    loss = clipped_ratio_loss(
        logp, torch.zeros(4, dtype=torch.float64), adv, torch.zeros(4, dtype=torch.long), 0.2, 0.2
    )
    # A=+1, r=1.5: -min(1.5, 1.2) = -1.2   (clipped: no incentive to go further)
    # A=-1, r=1.5: -min(-1.5, -1.2) = 1.5  (unclipped: pessimistic bound)
    # A=+1, r=0.5: -min(0.5, 0.8) = -0.5
    # A=-1, r=0.5: -min(-0.5, -0.8) = 0.8
    assert loss.tolist() == pytest.approx([-1.2, 1.5, -0.5, 0.8])
    # clipped where the advantage pushes past the range: tokens 0 (high, A>0) and 3 (low, A<0) -> 2/4
    assert float(clip_fraction(logp, torch.zeros(4, dtype=torch.float64), adv, 0.2, 0.2)) == pytest.approx(
        0.5
    )


def test_clipped_ratio_asymmetric_epsilon() -> None:
    # eps_low 0.2, eps_high 0.28 (DAPO clip-higher): r = 1.25, A = 1 -> -min(1.25, 1.25) = -1.25, not -1.2
    loss = clipped_ratio_loss(t(LN(1.25)), t(0), t(1), torch.zeros(1, dtype=torch.long), 0.2, 0.28)
    assert loss.item() == pytest.approx(-1.25)


def test_gspo_uses_one_ratio_per_sequence() -> None:
    # sequence 0: log-ratios [ln 2, 0] -> mean ln2/2 -> ratio sqrt(2) = 1.4142 > 1.2 -> clipped: -1.2 * A(=1)
    # sequence 1: log-ratios [0.1, -0.1] -> mean 0 -> ratio 1 -> -1 * A(=2) = -2
    logp = t(LN(2), 0.0, 0.1, -0.1)
    seq = torch.tensor([0, 0, 1, 1])
    loss = gspo_loss(logp, torch.zeros(4, dtype=torch.float64), t(1, 1, 2, 2), seq, 0.2, 0.2)
    assert loss.tolist() == pytest.approx([-1.2, -1.2, -2.0, -2.0])


def test_cispo_caps_detached_weight_and_keeps_gradient() -> None:
    # r = 3, cap 1 + eps_high = 2, A = 0.5: loss = -2 * 0.5 * ln 3 = -1.0986; d loss / d logp = -2 * 0.5 = -1
    logp = t(LN(3)).requires_grad_()
    loss = cispo_loss(logp, t(0), t(0.5), torch.zeros(1, dtype=torch.long), 0.2, 1.0)
    assert loss.item() == pytest.approx(-1.0 * LN(3))
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(-1.0)


def test_kl_k3_by_hand() -> None:
    # logp = 0, ref = ln 0.5: d = -0.6931; exp(d) - d - 1 = 0.5 + 0.6931 - 1 = 0.19315; equal logps -> 0
    assert kl_k3(t(0.0, -1.0), t(LN(0.5), -1.0)).tolist() == pytest.approx([0.5 + LN(2) - 1, 0.0])


def test_truncated_importance_sampling_by_hand() -> None:
    # exp(-1 - -2) = e = 2.718 -> capped at 2; exp(-2 - -1) = 0.3679; unknown sampler logprob (NaN) -> 1
    w = truncated_is_weights(t(-1.0, -2.0, -1.0), t(-2.0, -1.0, float("nan")), 2.0)
    assert w.tolist() == pytest.approx([2.0, math.exp(-1), 1.0])


def test_token_weights_by_hand() -> None:
    seq = torch.tensor([0, 0, 1, 1, 1])
    # "sequence": sequences of 2 and 3 tokens, 2 sequences -> 1/(2*2), 1/(3*2)
    assert token_weights(seq, seq, "sequence", 10).tolist() == pytest.approx(
        [1 / 4, 1 / 4, 1 / 6, 1 / 6, 1 / 6]
    )
    # "token": 1/5 each;  "constant": 1/(2 sequences * 10 max tokens) = 1/20
    assert token_weights(seq, seq, "token", 10).tolist() == pytest.approx([0.2] * 5)
    assert token_weights(seq, seq, "constant", 10).tolist() == pytest.approx([0.05] * 5)
    # one unit for both sequences (trajectory_weight="tokens") -> token mean
    assert token_weights(seq, torch.zeros(5, dtype=torch.long), "sequence", 10).tolist() == pytest.approx(
        [0.2] * 5
    )


def test_loss_registry_names_every_config_value() -> None:
    from typing import get_args

    from art_core.config import LossName, TrainConfig

    levels = get_args(TrainConfig.model_fields["importance_sampling_level"].annotation)
    assert set(LOSSES) == {(name, level) for name in get_args(LossName) for level in levels}


def test_policy_loss_combines_is_weight_kl_and_token_weights_by_hand() -> None:
    # ratio 1 everywhere (old == logp): clipped_ratio_loss = -A -> [-1, 1]
    # TIS: min(exp(ln .5 - ln .25), 1.5) = 1.5 on token 0; NaN sampler logprob on token 1 -> 1 -> [-1.5, 1]
    # k3 KL to ref [ln .25, ln .25]: d = [ln .5, 0] -> [.5 - ln .5 - 1, 0] = [ln 2 - .5, 0]
    # beta .1 -> [-1.5 + .1 (ln 2 - .5), 1]; weights [.5, .5] -> .5 (-0.5 + .1 (ln 2 - .5))
    logp = t(LN(0.5), LN(0.25))
    terms = policy_loss(
        loss_spec("grpo"), logp, logp.clone(), t(1, -1), torch.tensor([0, 0]), t(0.5, 0.5),
        eps_low=0.2, eps_high=0.2, sampler_logp=t(LN(0.25), float("nan")), tis_cap=1.5,
        ref_logp=t(LN(0.25), LN(0.25)), beta=0.1,
    )  # fmt: skip
    assert terms.loss.item() == pytest.approx(0.5 * (-0.5 + 0.1 * (LN(2) - 0.5)))
    assert terms.kl.tolist() == pytest.approx([LN(2) - 0.5, 0.0])
    # without TIS and KL it is the weighted per-token loss alone, and no KL comes back
    plain = policy_loss(loss_spec("grpo"), logp, logp.clone(), t(1, -1), torch.tensor([0, 0]), t(0.5, 0.5),
                        eps_low=0.2, eps_high=0.2)
    assert plain.loss.item() == pytest.approx(0.0) and plain.kl is None


def test_loss_spec_picks_sequence_level_ratios_without_string_tests() -> None:
    assert loss_spec("grpo", "sequence").per_token is gspo_loss
    assert loss_spec("dr_grpo", "sequence").normalization == "constant"
    assert loss_spec("gspo").per_token is gspo_loss and loss_spec("cispo", "sequence").per_token is cispo_loss
    with pytest.raises(ValueError, match="unknown loss 'ppo'"):
        loss_spec("ppo")


def test_group_advantages_by_hand() -> None:
    # rewards [1, 0, 0, 0]: mean 0.25 -> [0.75, -0.25, -0.25, -0.25]
    # unbiased std = sqrt((0.5625 + 3 * 0.0625) / 3) = sqrt(0.25) = 0.5 -> / (0.5 + 1e-4)
    adv = group_advantages(t(1, 0, 0, 0))
    assert adv.tolist() == pytest.approx([0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001])
    assert group_advantages(t(1, 0, 0, 0), scale=False).tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_all_equal_group_trains_nothing_and_says_so() -> None:
    groups = [
        TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)]),
        TrajectoryGroup([Trajectory(reward=0.5) for _ in range(4)]),
        TrajectoryGroup([Trajectory(reward=0.5)]),
    ]
    out = step_advantages(groups)
    assert out[0].skipped is None and out[0].advantages[0] > 0 > out[0].advantages[1]
    assert out[1].skipped == "group 1: all 4 rewards were 0.5"
    assert out[1].advantages == [0.0] * 4
    assert out[2].skipped is not None and "group 2" in out[2].skipped
