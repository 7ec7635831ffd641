"""The CPU twin of what the first GPU run found: a bfloat16 engine that merges adapters into its weights
rounds a small step (lr 1e-5) away and keeps serving the previous weights; applied unmerged, as on CUDA
(`lora.merges_half`), it serves the step the trainer trained.

Trainer and engine both in bfloat16 on CPU, as on a GPU machine (so the trainer's side of the check is
its own peft model, not a reference merged the engine's way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import art_core as art
from art_train import LocalBackend
from art_train.service import WeightSyncError

from .test_weight_sync import LR, engine_loads, groups_for


async def _first_step(tmp_path: Path, tiny_model_path: Path) -> tuple[LocalBackend, art.TrainableModel, object]:
    backend = LocalBackend(path=tmp_path, engine_dtype="bfloat16")
    model = art.TrainableModel(name="half", project="rel", base_model=str(tiny_model_path),
                               config=art.ModelConfig(dtype="bfloat16"))
    await model.register(backend)
    try:
        return backend, model, await model.train(await groups_for(model), config=LR, verbose=False)
    except WeightSyncError as exc:
        return backend, model, exc


async def test_merged_bfloat16_rounds_a_small_step_away(tiny_model_path: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr("art_train.engines.transformers.engine.merges_half", lambda device: True)
    backend, _, outcome = await _first_step(tmp_path, tiny_model_path)
    try:
        # the engine served weights short of step 1's under its name (on the tiny model half the step
        # rounds away; on the H200's Qwen2.5-0.5B shape all of it), and the check refused them
        assert isinstance(outcome, WeightSyncError), outcome
        assert "the engine is not serving the trained weights" in str(outcome)
    finally:
        await backend.close()


async def test_unmerged_bfloat16_serves_the_trained_step(tiny_model_path: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr("art_train.engines.transformers.engine.merges_half", lambda device: False)
    backend, model, outcome = await _first_step(tmp_path, tiny_model_path)
    try:
        assert not isinstance(outcome, WeightSyncError), outcome
        m = outcome.metrics
        assert m["weight_sync/distinguishable"] == 1.0
        assert m["weight_sync/vs_previous/s"] == pytest.approx(1.0, abs=0.2)  # it moved all the way to step 1
        # and a stale adapter is still caught by the probe
        with engine_loads(backend, "half", 2, 1), pytest.raises(WeightSyncError, match="checkpoint 1's"):
            await model.train(await groups_for(model), config=LR, verbose=False)
    finally:
        await backend.close()
