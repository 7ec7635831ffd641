"""GPU choices a CPU can check: bfloat16 weights with float32 LoRA and optimizer state, the weight-sync
tolerance by the engine's dtype and device, and the colocated engine's KV-cache bound."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

import art_core as art
from art_train.memory import engine_kv_bytes, fit_max_batch, kv_bytes_per_token
from art_train.trainer import Trainer
from art_train.weight_sync import sync_tolerance


def _groups() -> list[art.TrajectoryGroup]:
    groups = []
    for g in range(2):
        trajs = []
        for k in range(2):
            ids = [100 + 7 * k + i for i in range(12)]
            t = art.Trajectory(messages=[{"role": "user", "content": f"question {g}"}], reward=float(k))
            t.turns.append(art.assistant_turn("x", token_ids=ids, logprobs=[-1.0] * len(ids)))
            trajs.append(t)
        groups.append(art.TrajectoryGroup(trajs))
    return groups


def _dtypes(trainer: Trainer) -> tuple[set, set, set, set]:
    frozen = {p.dtype for p in trainer.peft.parameters() if not p.requires_grad}
    trainable = {p.dtype for p in trainer.peft.parameters() if p.requires_grad}
    state = {v.dtype for s in trainer.optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.ndim}
    devices = {p.device.type for p in trainer.peft.parameters()}
    return frozen, trainable, state, devices


def test_bfloat16_weights_train_float32_lora_and_optimizer_state_also_after_resume(tiny_model_path: Path,
                                                                                 tmp_path: Path) -> None:
    model = art.TrainableModel(name="bf", project="gpu", base_model=str(tiny_model_path),
                               config=art.ModelConfig(dtype="bfloat16", autocast=None))
    rundir = art.RunDir("gpu", "bf", root=str(tmp_path))
    trainer = Trainer(model, rundir, device="cpu")
    trainer.train(_groups(), art.TrainConfig(learning_rate=1e-4))
    frozen, trainable, state, devices = _dtypes(trainer)
    assert frozen == {torch.bfloat16} and trainable == {torch.float32} and state == {torch.float32}
    assert devices == {"cpu"}
    resumed = Trainer(model, rundir, device="cpu")  # from the saved checkpoint and optimizer state
    frozen, trainable, state, _ = _dtypes(resumed)
    assert frozen == {torch.bfloat16} and trainable == {torch.float32} and state == {torch.float32}


@pytest.mark.parametrize(("dtype", "device", "expected"), [
    ("auto", "cuda", 0.1), ("auto", "cuda:1", 0.1), ("auto", "cpu", 2e-3), ("auto", None, 2e-3),
    ("float32", "cuda", 2e-3), ("bfloat16", "cpu", 0.1), ("float16", "cuda", 0.1)])
def test_sync_tolerance_follows_the_engines_dtype_and_device(dtype: str, device: str | None, expected: float) -> None:
    assert sync_tolerance(dtype, device) == expected


def test_kv_bound_is_what_a_cache_of_that_size_holds() -> None:
    config = AutoConfig.for_model("qwen2", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=2)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    batch, length = 3, 17
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.randint(0, 512, (batch, length)), cache=cache, use_cache=True)
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert held == engine_kv_bytes(config, batch, length, "float32")
    assert engine_kv_bytes(config, batch, length, "bfloat16", prefix_cache_bytes=100) == held // 2 + 100


def test_fit_max_batch_for_qwen25_7b_beside_its_trainer() -> None:
    config = AutoConfig.for_model("qwen2", hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                                  num_key_value_heads=4, intermediate_size=18944, vocab_size=152064)
    assert kv_bytes_per_token(config) == 2 * 28 * 4 * 128 * 2  # 56 KiB a token in bfloat16
    gib = 1 << 30
    n = fit_max_batch(config, total_bytes=139 * gib, weight_bytes=15 * gib, trainer_peak_bytes=40 * gib,
                      max_seq_len=8192)
    free = 139 * gib * 0.9 - 2 * 15 * gib - 40 * gib
    assert n == int(free // (8192 * 57344)) and n > 0
    assert engine_kv_bytes(config, n, 8192) <= free < engine_kv_bytes(config, n + 1, 8192)
    assert fit_max_batch(config, total_bytes=40 * gib, weight_bytes=15 * gib, trainer_peak_bytes=20 * gib,
                         max_seq_len=8192) == 0
