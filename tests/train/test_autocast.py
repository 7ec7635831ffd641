"""Mixed precision (`ModelConfig.autocast`) and shared prompts in the SFT step, on the tiny model."""

from __future__ import annotations

import pytest
import torch

import art_core as art
from art_train.trainer import Trainer, selected_logprobs


def test_logprob_head_ignores_autocast() -> None:
    # the chunked head recomputes its logits in backward; both passes must use the weight's dtype
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 16, generator=g, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (7,), generator=g)
    plain, _ = selected_logprobs(hidden, weight, targets, chunk=3)
    plain.sum().backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed, _ = selected_logprobs(hidden, weight, targets, chunk=3)
        mixed.sum().backward()
    assert torch.equal(mixed, plain)  # bf16 logits would differ around 1e-2
    assert torch.equal(hidden.grad, grads[0]) and torch.equal(weight.grad, grads[1])


def _sft_trainer(tiny_model_path, root, name: str, autocast: str | None) -> Trainer:  # noqa: ANN001
    config = art.ModelConfig(autocast=autocast, seed=1)
    model = art.TrainableModel(name=name, project="t", base_model=str(tiny_model_path), config=config)
    return Trainer(model, art.RunDir("t", name, root=root), device="cpu")


def _examples() -> list[art.Trajectory]:
    system = {"role": "system", "content": "You answer geography questions in one word. " * 3}
    pairs = [("capital of France?", "Paris"), ("capital of Italy?", "Rome"), ("capital of Spain?", "Madrid")]
    return [art.Trajectory(messages=[system, {"role": "user", "content": q}, {"role": "assistant", "content": a}])
            for q, a in pairs]  # fmt: skip


def test_sft_under_bfloat16_autocast_runs_bf16_and_tracks_float32(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    plain = _sft_trainer(tiny_model_path, tmp_path, "plain", None)
    mixed = _sft_trainer(tiny_model_path, tmp_path, "mixed", "bfloat16")
    seen: list[torch.dtype] = []
    layer = mixed.policy.causal_lm.model.layers[0].mlp.down_proj
    hook = layer.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    config = art.SFTConfig(learning_rate=3e-2, batch_size=3)
    losses = {"plain": [], "mixed": []}
    try:
        for _ in range(4):
            losses["plain"].append(plain.train_sft(_examples(), config).metrics["loss"])
            losses["mixed"].append(mixed.train_sft(_examples(), config).metrics["loss"])
    finally:
        hook.remove()
    assert seen and set(seen) == {torch.bfloat16}  # the decoder really computed in bfloat16
    assert losses["mixed"][-1] < losses["mixed"][0] - 0.2, losses  # it learns
    for a, b in zip(losses["plain"], losses["mixed"], strict=True):
        assert b == pytest.approx(a, rel=0.05), losses  # and follows the float32 run
    # weights and optimizer stay float32; the saved adapter too
    assert all(p.dtype == torch.float32 for p in mixed.policy.params())


def test_sft_rows_share_the_system_prompt(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    # the three examples share the system prompt: one group, whose prompt runs forward once, then
    # their three short rests in one call (Policy.row_chunks)
    trainer = _sft_trainer(tiny_model_path, tmp_path, "shared", None)
    calls: list[tuple[int, int]] = []
    decoder = trainer.policy.causal_lm.get_decoder()
    hook = decoder.register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        trainer.train_sft(_examples(), art.SFTConfig(learning_rate=1e-3, batch_size=3))
    finally:
        hook.remove()
    assert len(calls) == 2 and calls[0][0] == 1 and calls[1][0] == 3  # the shared prompt, then the three rests
    assert calls[0][1] > calls[1][1]  # the system prompt is the longest part


@pytest.mark.parametrize(
    ("asked", "device", "native", "expected"),
    [
        (None, "cpu", True, None),
        ("auto", "cpu", True, "bfloat16"),
        ("auto", "cpu", False, None),  # AVX2 only: bfloat16 matmuls are emulated, float32 is faster
        ("auto", "cuda:0", False, "bfloat16"),
        ("bfloat16", "cpu", True, "bfloat16"),
        ("bfloat16", "cpu", False, "bfloat16"),  # kept as asked, with a warning
    ],
)
def test_training_autocast_is_bfloat16_only_where_native_unless_asked(monkeypatch, caplog, asked, device, native, expected):  # noqa: ANN001, E501
    from art_train import models

    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: native)
    with caplog.at_level("WARNING", logger="art_train.models"):
        assert models.training_autocast(asked, device) == expected
    warned = "without native bfloat16" in caplog.text
    assert warned == (asked == "bfloat16" and device == "cpu" and not native)
    if warned:
        assert "autocast='auto'" in caplog.text  # the message names the fix


def test_trainer_resolves_auto_autocast_by_the_cpu(monkeypatch, tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    from art_train import models

    for native, expected in ((False, None), (True, "bfloat16")):
        monkeypatch.setattr(models, "cpu_has_native_bf16", lambda native=native: native)
        trainer = _sft_trainer(tiny_model_path, tmp_path, f"auto-{native}", "auto")
        assert trainer.policy.autocast == expected
    with pytest.raises(ValueError, match="autocast"):
        art.ModelConfig(autocast="float16")
