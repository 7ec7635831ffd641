"""The vLLM engine against a real vLLM server (CI: `bash scripts/setup_vllm.sh`, ART_VLLM_PYTHON=.venv-vllm/bin/python)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

import art_core as art
from art_train import LocalBackend
from art_train.service import WeightSyncError
from tests.support.vllm import vllm_python, vllm_tiny_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow]



TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.timeout(600)
async def test_vllm_engine_serves_trains_swaps_and_restarts(tmp_path: Path,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    backend = LocalBackend(path=tmp_path, engine="vllm", vllm_python=vllm_python())
    model = art.TrainableModel(name="vl", project="serve", base_model=str(vllm_tiny_model(tmp_path_factory)),
                               config=art.ModelConfig(max_seq_len=1024))
    try:
        await model.register(backend)  # starts vLLM, loads vl@0, checks weight sync
        engine = backend.service.entry("vl").engine
        async with httpx.AsyncClient(base_url=engine.url) as raw:  # vLLM's own port wants the engine's key
            assert (await raw.get("/v1/models")).status_code == 401
            authorised = await raw.get("/v1/models", headers={"Authorization": f"Bearer {engine.api_key}"})
            assert authorised.status_code == 200
        assert engine.api_key not in Path(f"/proc/{engine.pid}/cmdline").read_bytes().decode(errors="replace")
        client = model.openai_client()
        prompt = [{"role": "user", "content": "What is the weather in Paris?"}]

        async def rollout(seed: int) -> art.Trajectory:
            with art.capture() as traj:
                r = await client.chat.completions.create(model=model.served_name(), messages=prompt, tools=TOOLS,
                                                         max_tokens=24, seed=seed)
            traj.reward = float(len(r.choices[0].message.content or "") % 4)
            traj.metadata["served_ids"] = r.choices[0].model_extra["token_ids"]
            return traj

        groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(i) for i in range(4))],
                                                    show_progress=False)
        for traj in groups[0].trajectories:
            sample = traj.turns[-1]["sample"]
            assert sample["token_ids"] == traj.metadata["served_ids"] and sample["step"] == 0
            assert len(sample["token_ids"]) == len(sample["logprobs"]) > 0
        result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-3), verbose=False)
        assert result.step == 1 and result.metrics["weight_sync/max_abs_diff"] < 0.5  # bfloat16 on CPU (float32: ~1e-4)
        r = await client.chat.completions.create(model=model.served_name(), messages=prompt, max_tokens=4)
        assert r.model_extra["art_step"] == 1

        # a deliberately wrong adapter must fail the weight-sync check on vLLM too
        entry = backend.service.entry("vl")
        wrong = entry.rundir.path / "wrong-adapter"  # adapters load only from inside the run directory
        shutil.copytree(entry.rundir.checkpoint_path(1), wrong)
        torch.manual_seed(0)
        tensors = {k: (torch.randn_like(v) * 0.5 if "lora_B" in k else v)
                   for k, v in load_file(wrong / "adapter_model.safetensors").items()}
        save_file(tensors, wrong / "adapter_model.safetensors")
        with pytest.raises(WeightSyncError, match="weight-sync check failed for vl@1"):
            await backend._call(entry.swap.load_and_verify(1, wrong))
        ok = await backend._call(entry.swap.load_and_verify(1))  # the true checkpoint passes again
        assert ok["weight_sync/max_abs_diff"] < 0.5 and ok["weight_sync/mean_abs_diff"] < 0.1

        os.killpg(engine.pid, 9)  # the next request (or the watchdog) restarts it and reloads the adapters
        strict = client.with_options(max_retries=0)  # the restart must be invisible: no 5xx, no client retry
        r = await strict.chat.completions.create(model=model.served_name(), messages=prompt, max_tokens=4)
        assert r.model_extra["art_step"] == 1 and r.choices[0].model_extra["token_ids"]
    finally:
        await backend.close()
