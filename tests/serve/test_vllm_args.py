"""`ModelConfig.vllm` on vLLM's command line (no vLLM needed: `_command` builds the list the engine spawns)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from art_core import ModelConfig, VLLMConfig
from art_train.engines import vllm_engine
from art_train.engines.vllm_engine import VLLMEngine


@pytest.fixture(autouse=True)
def _cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: False)
    monkeypatch.setattr(vllm_engine, "_cpu_dtype", lambda: "float32")


def _command(config: ModelConfig | None) -> list[str]:
    engine = VLLMEngine("/models/base", model_config=config, python="py", port=8000)
    return engine._command(Path("t.jinja"))


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_defaults_leave_the_command_line_as_it_was() -> None:
    expected = [
        "py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/base", "--served-model-name", "base",
        "--host", "127.0.0.1", "--port", "8000", "--max-model-len", "4096", "--enable-lora", "--max-lora-rank", "8",
        "--max-loras", "4", "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", "t.jinja",
        "--dtype", "float32", "--enforce-eager",
    ]
    assert _command(ModelConfig()) == expected


@pytest.mark.parametrize(
    ("settings", "flag", "value"),
    [
        ({"tensor_parallel_size": 2}, "--tensor-parallel-size", "2"),
        ({"data_parallel_size": 4}, "--data-parallel-size", "4"),
        ({"gpu_memory_utilization": 0.45}, "--gpu-memory-utilization", "0.45"),
        ({"max_loras": 8}, "--max-loras", "8"),
        ({"max_lora_rank": 64}, "--max-lora-rank", "64"),
    ],
)
def test_each_setting_reaches_the_command_line(settings: dict[str, object], flag: str, value: str) -> None:
    args = _command(ModelConfig(vllm=VLLMConfig.model_validate(settings)))
    assert _value(args, flag) == value and args.count(flag) == 1


def test_sleep_mode_is_a_bare_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: True)  # on a CPU it is refused (test_vllm_sleep.py)
    assert "--enable-sleep-mode" in _command(ModelConfig(vllm={"enable_sleep_mode": True}))  # type: ignore[arg-type]
    assert "--enable-sleep-mode" not in _command(ModelConfig())


def test_the_lora_rank_sets_max_lora_rank_unless_given() -> None:
    assert _value(_command(ModelConfig(lora_rank=24)), "--max-lora-rank") == "32"
    assert _value(_command(ModelConfig(lora_rank=24, vllm=VLLMConfig(max_lora_rank=128))), "--max-lora-rank") == "128"


def test_extra_args_come_last_before_the_engines_own() -> None:
    config = ModelConfig(vllm=VLLMConfig(extra_args=["--max-num-seqs", "16", "--dtype", "bfloat16"]))
    engine = VLLMEngine("/models/base", model_config=config, python="py", extra_args=["--seed", "1"])
    args = engine._command(Path("t"))
    assert args[-6:] == ["--max-num-seqs", "16", "--dtype", "bfloat16", "--seed", "1"]
    assert engine.cpu_dtype == "bfloat16" and engine.sync_tolerance == 0.5  # a --dtype there wins, as before


def test_a_model_config_with_vllm_settings_crosses_the_wire() -> None:
    config = ModelConfig(vllm=VLLMConfig(tensor_parallel_size=2, extra_args=["--seed", "3"]))
    assert ModelConfig.model_validate_json(config.model_dump_json()) == config


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"data_parallel_size": 0}, "data_parallel_size"),
        ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"max_loras": 0}, "max_loras"),
        ({"max_lora_rank": 24}, "power of two for max_lora_rank, got 24; use 32"),
        ({"tensor_parallel": 2}, "tensor_parallel\n  Extra inputs are not permitted"),
    ],
)
def test_bad_settings_are_refused_by_name(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelConfig(vllm=settings)  # type: ignore[arg-type]


def test_max_lora_rank_below_the_lora_rank_is_refused() -> None:
    with pytest.raises(ValidationError, match="vllm.max_lora_rank=8 is below lora_rank=16.*set vllm.max_lora_rank to 16"):
        ModelConfig(lora_rank=16, vllm=VLLMConfig(max_lora_rank=8))


async def test_a_model_whose_settings_differ_from_the_shared_engines_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from art_core import TrainableModel
    from art_train.config import BackendConfig
    from art_train.service import ModelService

    base = tmp_path / "base"  # a model folder by its config.json; nothing is loaded
    base.mkdir()
    (base / "config.json").write_text("{}")
    service = ModelService(BackendConfig(path=tmp_path / "runs", engine="vllm"))
    first = VLLMEngine(base, model_config=ModelConfig(), python="py")
    service._engines[(str(base), "vllm", "auto")] = first  # as if the first model had started it
    same = TrainableModel(name="a", base_model=str(base), config=ModelConfig())
    assert await service._engine_for(same) is first and "not applied" not in caplog.text
    other = TrainableModel(name="b", base_model=str(base), config=ModelConfig(vllm=VLLMConfig(max_loras=8)))
    assert await service._engine_for(other) is first
    assert "model b: its vllm settings are not applied" in caplog.text and "{}" in caplog.text


@pytest.mark.parametrize(
    ("cpus", "ranks", "expected"),
    [([0, 1], 1, "0,1"), ([1], 1, "1"), ([0, 1, 2, 3], 2, "0,1|2,3"), ([4, 5, 6], 2, "4|5"), ([0], 2, None),
     ([], 1, None)],
)
def test_omp_binding_cuts_the_cores_into_one_run_per_rank(cpus: list[int], ranks: int, expected: str | None) -> None:
    assert vllm_engine.omp_binding(cpus, ranks) == expected


def test_a_replicas_cores_reach_vllms_environment_unless_the_user_set_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert VLLMEngine("/m", python="py", cpus=[1])._env()["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in VLLMEngine("/m", python="py")._env()  # one engine: vLLM's 'auto'
    two = ModelConfig(vllm=VLLMConfig(tensor_parallel_size=2))
    assert VLLMEngine("/m", model_config=two, python="py", cpus=[2, 3])._env()["VLLM_CPU_OMP_THREADS_BIND"] == "2|3"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert VLLMEngine("/m", python="py", cpus=[1])._env()["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"


def test_a_replicas_gpus_reach_vllms_environment_over_the_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    assert VLLMEngine("/m", python="py", env={"CUDA_VISIBLE_DEVICES": "6,7"})._env()["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert VLLMEngine("/m", python="py")._env()["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    from pathlib import Path

    from art_train.engines import bundled_engine

    one = bundled_engine("vllm", Path("/m"), None, None, "auto", "py", {"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert one._env()["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"  # type: ignore[attr-defined]  # replicas=1: one vLLM
    with pytest.raises(ValueError, match="runs in the server's process"):
        bundled_engine("transformers", Path("/m"), None, None, "auto", None, {"CUDA_VISIBLE_DEVICES": "4"})


def test_on_a_gpu_no_cpu_binding_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: True)
    env = VLLMEngine("/m", python="py", cpus=[1])._env()
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env and "VLLM_CPU_KVCACHE_SPACE" not in env
