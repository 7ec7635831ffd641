"""The trainer's own `policy_loss` against TRL 1.16's own `GRPOTrainer._compute_loss`, on identical inputs (to 1e-5).

`policy_loss` is the function the GRPO step (`art_train.trainer.grpo`) applies: the per-token loss of
the configured variant, the truncated-IS weights, the KL term and the token weights, combined there
and nowhere else. Breaking any of them here breaks this test.

TRL's method runs unmodified on a namespace standing in for the trainer instance: it supplies the
config attributes `_compute_loss` reads, a logprob function returning our fixed per-token logprobs
(so both sides see the same numbers), and a single-process accelerator (gather/reduce = identity).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from art_train.trainer import loss_spec, policy_loss, token_weights

os.environ.setdefault("HF_HUB_OFFLINE", "1")
trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")

B, T, MAX_COMPLETION = 4, 6, 8


class _Accelerator:
    num_processes = 1

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return x

    gather_for_metrics = gather

    def reduce(self, x: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return x


def _trl_loss(
    loss_type: str, level: str, logp: torch.Tensor, inputs: dict, beta: float, eps_high: float, tis: bool
):
    from collections import defaultdict

    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=eps_high,
        use_vllm=tis,
        vllm_importance_sampling_correction=tis,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_COMPLETION,
        accelerator=_Accelerator(),
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list)},
    )
    fake.get_off_policy_mask = trl_grpo.GRPOTrainer.get_off_policy_mask
    return trl_grpo.GRPOTrainer._compute_loss(fake, None, inputs)


def _inputs(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = [6, 3, 5, 1]
    mask = torch.zeros(B, T)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": torch.tensor([1.3, -0.7, 0.4, -1.0]),
        "old_per_token_logps": -torch.rand(B, T, generator=g) * 2,
        "ref_per_token_logps": -torch.rand(B, T, generator=g) * 2,
        "sampling_per_token_logps": -torch.rand(B, T, generator=g) * 2,
        "num_items_in_batch": mask.sum(),
    }


def _ours(name: str, level: str, logp: torch.Tensor, inputs: dict, beta: float, eps_high: float, tis: bool):
    mask = inputs["completion_mask"].bool()
    seq = torch.arange(B)[:, None].expand(B, T)[mask]  # [N]
    lp = logp[mask]  # [N]
    old = inputs["old_per_token_logps"][mask]
    adv = inputs["advantages"][:, None].expand(B, T)[mask]
    spec = loss_spec(name, level)
    terms = policy_loss(
        spec, lp, old, adv, seq, token_weights(seq, seq, spec.normalization, MAX_COMPLETION),
        eps_low=0.2, eps_high=eps_high,
        sampler_logp=inputs["sampling_per_token_logps"][mask], tis_cap=2.0 if tis else None,
        ref_logp=inputs["ref_per_token_logps"][mask] if beta else None, beta=beta,
    )  # fmt: skip
    return terms.loss

CASES = [
    # (our name, TRL loss_type, importance level, beta, TIS)
    ("grpo", "grpo", "token", 0.0, False),
    ("grpo", "grpo", "token", 0.04, True),
    ("grpo", "grpo", "token", 0.04, False),  # the KL term alone
    ("grpo", "grpo", "token", 0.0, True),  # the truncated-IS weights alone
    ("dr_grpo", "dr_grpo", "token", 0.0, False),
    ("dr_grpo", "dr_grpo", "token", 0.1, True),
    ("dapo", "dapo", "token", 0.0, False),
    ("dapo", "dapo", "token", 0.04, True),
    ("gspo", "grpo", "sequence", 0.0, False),
    ("gspo", "grpo", "sequence", 0.04, True),
    ("cispo", "cispo", "token", 0.0, False),
    ("cispo", "cispo", "token", 0.0, True),
]


@pytest.mark.parametrize(("name", "trl_type", "level", "beta", "tis"), CASES)
def test_loss_and_gradient_match_trl(name: str, trl_type: str, level: str, beta: float, tis: bool) -> None:
    inputs = _inputs(seed=CASES.index((name, trl_type, level, beta, tis)))
    g = torch.Generator().manual_seed(7)
    # current logprobs near the old ones so that some ratios are clipped and some are not
    base = inputs["old_per_token_logps"] + (torch.rand(B, T, generator=g) - 0.5) * 0.8
    if tis:
        old, samp = inputs["old_per_token_logps"], inputs["sampling_per_token_logps"]
        inputs["importance_sampling_ratio"] = torch.clamp(torch.exp(old - samp), max=2.0)
    eps_high = 0.28
    # TRL's cispo caps the ratio at epsilon_high itself; ours at 1 + epsilon_high
    trl_eps_high = 1 + eps_high if name == "cispo" else eps_high

    ours_lp = base.clone().requires_grad_()
    ours = _ours(name, level, ours_lp, inputs, beta, eps_high, tis)
    ours.backward()
    trl_lp = base.clone().requires_grad_()
    theirs = _trl_loss(trl_type, level, trl_lp, inputs, beta, trl_eps_high, tis)
    theirs.backward()

    assert ours.item() == pytest.approx(theirs.item(), abs=1e-5)
    mask = inputs["completion_mask"].bool()
    assert torch.allclose(ours_lp.grad[mask], trl_lp.grad[mask], atol=1e-5)
    assert ours_lp.grad[mask].abs().sum() > 0
