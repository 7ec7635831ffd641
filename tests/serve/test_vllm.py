"""The vLLM engine against a real vLLM server (CI: `bash scripts/setup_vllm.sh`, ART_VLLM_PYTHON=.venv-vllm/bin/python)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import art_core as art
from art_train import LocalBackend

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _vllm_python() -> str:
    python = os.environ.get("ART_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists() or subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip(f"no vLLM at {python}: run `bash scripts/setup_vllm.sh` or set ART_VLLM_PYTHON")
    return python


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.timeout(600)
async def test_vllm_engine_serves_trains_swaps_and_restarts(tmp_path: Path) -> None:
    backend = LocalBackend(path=tmp_path, engine="vllm", vllm_python=_vllm_python())
    model = art.TrainableModel(name="vl", project="serve", base_model="smollm2-135m",
                               config=art.ModelConfig(max_seq_len=1024))
    try:
        await model.register(backend)  # starts vLLM, loads vl@0, checks weight sync
        client = model.openai_client()
        prompt = [{"role": "user", "content": "What is the weather in Paris?"}]

        async def rollout(seed: int) -> art.Trajectory:
            with art.capture() as traj:
                r = await client.chat.completions.create(model=model.served_name(), messages=prompt, tools=TOOLS,
                                                         max_tokens=24, seed=seed)
            traj.reward = float(len(r.choices[0].message.content or "") % 4)
            return traj

        groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(i) for i in range(4))],
                                                    show_progress=False)
        sample = groups[0].trajectories[0].turns[-1]["sample"]
        assert len(sample["token_ids"]) == len(sample["logprobs"]) > 0 and sample["step"] == 0
        result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-3), verbose=False)
        assert result.step == 1 and "weight_sync/max_abs_diff" in result.metrics
        r = await client.chat.completions.create(model=model.served_name(), messages=prompt, max_tokens=4)
        assert r.model_extra["art_step"] == 1

        engine = backend.service.entry("vl").engine
        os.killpg(engine.pid, 9)  # the watchdog restarts it and reloads the adapters
        r = await client.chat.completions.create(model=model.served_name(), messages=prompt, max_tokens=4)
        assert r.model_extra["art_step"] == 1 and r.choices[0].model_extra["token_ids"]
    finally:
        await backend.close()
