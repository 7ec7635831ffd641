"""An alias's defaults (LoRA target modules, dtype, max length) fill every ModelConfig field the user
did not set, on LocalBackend and through RemoteBackend to a real `art serve`; a set field wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from safetensors import safe_open

import art_core as art
from art_train import LocalBackend, models
from art_train.models import ModelSpec, add_model, apply_model_defaults, model_spec, resolve_base_model
from art_train.service import ModelService
from tests.support.net import free_port
from tests.support.process import stop

ROOT = Path(__file__).resolve().parents[2]
ALIAS = "tiny-defaults"
# differs from ModelConfig's defaults in every field an alias sets
SPEC = dict(alias=ALIAS, hf_id="art-tests/tiny-llama", family="chatml", install="build_tiny_model(...)",
            license="-", target_modules=("q_proj", "v_proj"), dtype="float32", max_seq_len=256)


def _add(monkeypatch: pytest.MonkeyPatch, spec: ModelSpec) -> ModelSpec:
    """`add_model`, undone after the test: later tests use the same tiny folder, which must not get its defaults."""
    monkeypatch.setitem(models._MODELS, spec.alias, spec)
    assert add_model(spec) is spec and model_spec(spec.alias) is spec
    return spec


@pytest.fixture
def tiny_alias(tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    _add(monkeypatch, ModelSpec(folder=tiny_model_path, **SPEC))
    yield ALIAS


def test_unset_fields_take_the_alias_defaults_and_set_ones_win(tiny_alias: str, tiny_model_path: Path) -> None:
    filled = apply_model_defaults(art.ModelConfig(lora_rank=4), tiny_alias)
    assert (filled.target_modules, filled.dtype, filled.max_seq_len, filled.lora_rank) == (
        ["q_proj", "v_proj"], "float32", 256, 4)
    # set to ModelConfig's own default value is still set: it wins over the alias
    kept = apply_model_defaults(art.ModelConfig(max_seq_len=4096, target_modules=["k_proj"]), tiny_alias)
    assert (kept.target_modules, kept.max_seq_len, kept.dtype) == (["k_proj"], 4096, "float32")
    # the folder an alias points at gets the same defaults; a plain folder or HF id gets none
    assert apply_model_defaults(art.ModelConfig(), str(tiny_model_path)).max_seq_len == 256
    assert apply_model_defaults(art.ModelConfig(), "someone/not-an-alias").max_seq_len == 4096
    assert resolve_base_model(tiny_alias) == tiny_model_path


def test_the_test_alias_is_gone_after_its_test(tiny_model_path: Path) -> None:
    assert model_spec(ALIAS) is None and apply_model_defaults(art.ModelConfig(), str(tiny_model_path)).max_seq_len == 4096


def test_an_alias_needs_exactly_one_source_and_a_known_family(tiny_model_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="exactly one of gguf= .* or folder="):
        ModelSpec(**SPEC)
    with pytest.raises(ValueError, match="family 'nope' is not one of"):
        ModelSpec(folder=tiny_model_path, **{**SPEC, "family": "nope"})
    missing = _add(monkeypatch, ModelSpec(folder=tiny_model_path / "absent", **{**SPEC, "alias": "tiny-absent"}))
    with pytest.raises(FileNotFoundError, match=r"not installed: .*absent has no config.json. Install: `build_tiny"):
        resolve_base_model(missing.alias)


def _lora_targets(checkpoint: Path) -> tuple[set[str], set[str]]:
    """(adapter_config.json's target_modules, the module names the saved LoRA weights wrap)."""
    declared = set(json.loads((checkpoint / "adapter_config.json").read_text())["target_modules"])
    with safe_open(str(checkpoint / "adapter_model.safetensors"), "pt") as f:
        wrapped = {key.split(".lora_")[0].rsplit(".", 1)[-1] for key in f.keys()}
    return declared, wrapped


def _check_run(home: Path, name: str, targets: set[str], max_seq_len: int) -> None:
    run = home / "defaults" / "models" / name
    config = json.loads((run / "model.json").read_text())["config"]
    assert (set(config["target_modules"]), config["max_seq_len"], config["dtype"]) == (targets, max_seq_len, "float32")
    assert _lora_targets(run / "checkpoints" / "0000") == (targets, targets)


async def _too_long_is_refused_at(client: openai.AsyncOpenAI, served: str, limit: int) -> None:
    prompt = [{"role": "user", "content": "count " * 300}]  # ~300 tokens: under 4096, over 256
    with pytest.raises(openai.BadRequestError, match=f"limit of {limit}"):
        await client.chat.completions.create(model=served, messages=prompt, max_tokens=4)


async def test_local_backend_applies_alias_defaults_and_restores_them(tiny_alias: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    backend = LocalBackend(path=tmp_path)
    default = art.TrainableModel(name="alias-defaults", project="defaults", base_model=tiny_alias)
    explicit = art.TrainableModel(name="explicit-targets", project="defaults", base_model=tiny_alias,
                                  config=art.ModelConfig(target_modules=["k_proj"], max_seq_len=512))
    try:
        await default.register(backend)
        await explicit.register(backend)
        service = backend.service
        trainer = service.entry("alias-defaults").trainer
        assert trainer.policy.max_seq_len == 256 and service.entry("alias-defaults").engine.max_seq_len == 256
        assert service.entry("alias-defaults").engine.dtype == "float32"
        assert service.entry("explicit-targets").trainer.policy.max_seq_len == 512
        await _too_long_is_refused_at(default.openai_client(), default.served_name(), 256)
        assert default.config.max_seq_len == 4096  # the user's object is left as the user made it
    finally:
        await backend.close()
    _check_run(tmp_path, "alias-defaults", {"q_proj", "v_proj"}, 256)
    _check_run(tmp_path, "explicit-targets", {"k_proj"}, 512)

    # a restarted server restores the run from model.json with the values it was trained with,
    # even after the alias's defaults change
    _add(monkeypatch, ModelSpec(folder=model_spec(tiny_alias).folder, **{**SPEC, "max_seq_len": 128}))
    service = ModelService(path=tmp_path)
    try:
        await service.restore("alias-defaults")
        assert service.entry("alias-defaults").trainer.policy.max_seq_len == 256
        assert _lora_targets(service.entry("alias-defaults").trainer.checkpoint_path()) == ({"q_proj", "v_proj"},) * 2
    finally:
        await service.close()


# the real `art serve` command, in a process that first registers the test alias (as a user's launcher would)
_SERVE = """
import sys
from art_train.cli import main
from art_train.models import ModelSpec, add_model
add_model(ModelSpec(folder=sys.argv[1], **{spec!r}))
sys.exit(main(["serve", "--port", sys.argv[2], "--log-level", "warning"]))
"""


@pytest.mark.slow
async def test_remote_backend_sends_only_the_set_fields_and_the_server_fills_the_rest(
        tiny_model_path: Path, tmp_path: Path) -> None:
    port, home = free_port(), tmp_path / "home"
    env = {**os.environ, "ART_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "serve.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-c", _SERVE.format(spec=SPEC), str(tiny_model_path), str(port)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.time() < deadline, "art serve did not start in 90 s"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        async with art.RemoteBackend(url) as backend:
            default = art.TrainableModel(name="alias-defaults", project="defaults", base_model=ALIAS)
            explicit = art.TrainableModel(name="explicit-targets", project="defaults", base_model=ALIAS,
                                          config=art.ModelConfig(target_modules=["k_proj"]))
            await default.register(backend)
            await explicit.register(backend)
            await _too_long_is_refused_at(default.openai_client(), default.served_name(), 256)
            await default.register(backend)  # registering again (as after a restart) changes nothing
        _check_run(home, "alias-defaults", {"q_proj", "v_proj"}, 256)
        _check_run(home, "explicit-targets", {"k_proj"}, 256)
    finally:
        stop(proc)
