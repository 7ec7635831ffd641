"""The trainer on 2 ranks with the frozen base sharded by FSDP2 (`train_shard="fsdp"`, gloo, CPU, the tiny
model) against 1 rank: each rank holds half the base, rank 1 never reads the weights file, and the adapter
(2 GRPO steps, then an SFT step) and the weight-sync probe are the same; after a rank is killed mid-step,
the next step reloads rank 0's base and trains as 1 rank does."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import art_core as art
from art_train.config import BackendConfig
from art_train.trainer import Trainer, fsdp
from art_train.trainer.distributed import RankFailedError, Ranks
from art_train.trainer.fsdp import base_bytes, padding
from tests.train.test_distributed import LR, TOLERANCE, _groups, _lora, _max_diff, _model, _row

logger = logging.getLogger(__name__)


def test_train_shard_needs_two_ranks() -> None:
    with pytest.raises(ValueError, match="needs train_procs >= 2"):
        BackendConfig(train_shard="fsdp")
    assert BackendConfig(train_shard="fsdp", train_procs=2).train_shard == "fsdp"
    with pytest.raises(ValueError, match="shard must be None or 'fsdp'"):
        Ranks(2, "cpu", shard="zero3")
    from art_train.cli import build_parser

    assert build_parser().parse_args(["serve", "--train-procs", "2", "--train-shard", "fsdp"]).train_shard == "fsdp"


def test_padding_brings_every_rank_to_the_busiest() -> None:
    row = _row(4)
    shards = [[(0, [row]), (0, [row])], [(0, [row])], []]  # 2 rows, 1, none
    assert [padding(shards, r) for r in range(3)] == [0, 1, 2]


def test_fsdp_ranks_hold_half_the_base_and_train_the_same_adapter_as_one(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pads: list[list[int]] = []  # per batch, the padding of each rank (all computed on rank 0)

    def record(shards: list[Any], rank: int) -> int:
        pads.append([padding(shards, r) for r in range(len(shards))])
        return pads[-1][rank]

    monkeypatch.setattr(fsdp, "padding", record)
    ranks = Ranks(2, "cpu", timeout_s=120, shard="fsdp")
    base = shutil.copytree(tiny_model_path, tmp_path / "base")
    weights = base / "model.safetensors"
    register = ranks.register

    def register_without_the_weights(trainer: Trainer) -> None:
        weights.rename(base / "away")  # rank 0 has read it; rank 1 must build its base from rank 0's weights alone
        register(trainer)

    monkeypatch.setattr(ranks, "register", register_without_the_weights)
    one = Trainer(_model(tiny_model_path, "one"), art.RunDir("ranks", "one", tmp_path / "one"), device="cpu")
    two = Trainer(_model(base, "two"), art.RunDir("ranks", "two", tmp_path / "two"), device="cpu", ranks=ranks)
    assert ranks.running and two.policy.root is not None  # sharded as the Trainer was built, before any step
    try:
        groups = _groups(one)
        configs = [art.TrainConfig(learning_rate=LR),  # one optimizer step
                   art.TrainConfig(learning_rate=LR, batch_size=5, beta=0.05)]  # 3 steps: old and reference logprobs
        ids = [one.tokenizer("The capital of France is Paris.")["input_ids"]]
        probe = 0.0
        for config in configs:
            t0 = time.perf_counter()
            a = one.train(groups, config).metrics
            t1 = time.perf_counter()
            b = two.train(groups, config).metrics
            logger.info("GRPO step: 1 rank %.1f s, 2 FSDP ranks %.1f s", t1 - t0, time.perf_counter() - t1)
            for key in ("loss", "entropy", "kl", "clip_fraction", "grad_norm"):
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key
            for key in ("trained_tokens", "optimizer_steps", "rows"):
                assert b[key] == a[key], key
            # the weight-sync probe runs on both ranks, under the adapter in memory and a saved checkpoint; then
            # rank 0 alone saves and fingerprints the LoRA, and the next step must still find the ranks in step
            for step in (None, 1):
                (a_logp,), (b_logp,) = one.sequences_logprobs(ids, step), two.sequences_logprobs(ids, step)
                probe = max(probe, max(abs(x - y) for x, y in zip(a_logp, b_logp, strict=True)))
            assert two.adapter_fingerprint()  # a state_dict() on rank 0 alone

        sft = [t for g in groups for t in g.trajectories]
        a_sft = one.train_sft(sft, art.SFTConfig(learning_rate=LR, batch_size=5)).metrics
        b_sft = two.train_sft(sft, art.SFTConfig(learning_rate=LR, batch_size=5)).metrics
        assert b_sft["loss"] == pytest.approx(a_sft["loss"], rel=1e-5)

        held, whole = base_bytes(two.policy.root)  # the base's shard on rank 0; rank 1 holds the rest
        assert two.policy.root is not None and 0.45 * whole <= held <= 0.55 * whole, (held, whole)
        diff = _max_diff(_lora(one), _lora(two))
        assert max(float(v.abs().max()) for v in _lora(one).values()) > 10 * TOLERANCE  # the weights did move
        assert diff < TOLERANCE

        assert probe < 1e-5
        assert any(sum(p) for p in pads)  # some batch had ranks with fewer rows: they ran padding
        logger.info("base bytes on rank 0: %d of %d; max |1 rank - 2 FSDP ranks|: LoRA %.2e, probe logprobs %.2e; "
                    "padding rows per batch and rank %s", held, whole, diff, probe, pads)

        # a failed step stops the ranks, and with them the other half of the base: the next step starts them
        # again, and rank 0 reads its base from disk again
        (victim,) = ranks.pids()
        step, lora = two.step, _lora(two)

        def kill_rank_1(event: dict[str, Any]) -> None:
            if event["phase"] == "forward_backward" and event["done"] == 1:
                os.kill(victim, signal.SIGKILL)

        with pytest.raises(RankFailedError, match=r"rank 1 exited with code -9.*rank 0 reads its base again"):
            two.train(groups, configs[0], progress=kill_rank_1)
        assert two.step == step and _max_diff(_lora(two), lora) == 0 and not ranks.running  # rolled back
        (base / "away").rename(weights)
        a = one.train(groups, configs[1]).metrics
        b = two.train(groups, configs[1]).metrics
        assert ranks.running and ranks.pids() != [victim]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-7)
        assert _max_diff(_lora(one), _lora(two)) < TOLERANCE
        held, whole = base_bytes(two.policy.root)
        assert 0.45 * whole <= held <= 0.55 * whole, (held, whole)
    finally:
        ranks.stop()
        one.close()
        two.close()
