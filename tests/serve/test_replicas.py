"""Engine replicas behind one endpoint (`--replicas N`, art_train/serving/).

The router's rule and the replica set's retries are tested on fake in-process engines; then, on the tiny
model, two embedded-engine worker processes behind `LocalBackend`: requests spread over both, a step is
loaded and verified on each, and a replica killed with SIGKILL mid-request loses no request and comes
back verified.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import art_core as art
from art_train import BackendConfig, LocalBackend
from art_train.engines.base import ChatRequest, Engine, EngineUnavailable, SamplingParams
from art_train.serving import ReplicaSet, Router, session_key
from tests.support.fake_engine import FunctionEngine


@dataclass
class _Load:
    index: int
    inflight: int = 0
    served: int = 0


# -- the router ------------------------------------------------------------------------------------
def test_least_outstanding_requests_wins_and_ties_go_to_the_one_that_served_fewest() -> None:
    router = Router()
    loads = [_Load(0, 3), _Load(1, 1), _Load(2, 2)]
    assert router.pick(loads).index == 1
    assert router.pick([_Load(0, 1, served=9), _Load(1, 1, served=2)]).index == 1


def test_a_session_sticks_to_its_replica_until_it_is_much_busier_then_moves() -> None:
    router = Router(slack=4)
    loads = [_Load(0), _Load(1)]
    assert router.pick(loads, "t1").index == 0
    loads[0].inflight = 4  # busier, but within the slack (0 + 4): the prefix is worth it
    assert router.pick(loads, "t1").index == 0
    assert router.pick(loads, "t2").index == 1  # a new session goes to the least loaded
    loads[0].inflight = 5  # beyond the slack: the turn goes to the least loaded, and the session with it
    assert router.pick(loads, "t1").index == 1
    loads[0].inflight = 0
    assert router.pick(loads, "t1").index == 1


def test_a_session_whose_replica_is_down_goes_to_another() -> None:
    router = Router()
    loads = [_Load(0), _Load(1, inflight=2)]
    assert router.pick(loads, "t").index == 0
    assert router.pick([loads[1]], "t").index == 1  # replica 0 is not a candidate (down, or stale)


def test_session_key_is_the_trajectory_id_else_the_conversations_first_messages() -> None:
    turn1 = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    turn2 = [*turn1, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
    assert session_key("abc", turn1) == "id:abc"
    assert session_key(None, turn1) == session_key(None, turn2) != session_key(None, [{"role": "user", "content": "x"}])


def test_each_replica_gets_its_own_run_of_cores_or_one_core_in_turn() -> None:
    from art_train.serving.replicas import core_share

    assert [core_share([0, 1], 2, i) for i in range(2)] == [[0], [1]]
    assert [core_share([0, 1, 2, 3, 4], 2, i) for i in range(2)] == [[0, 1], [2, 3]]  # core 4 left unused
    assert [core_share([0, 1], 3, i) for i in range(3)] == [[0], [1], [0]]
    assert core_share([0, 1], 1, 0) == [0, 1]


def test_art_serve_takes_replicas_and_rejects_zero(capsys: pytest.CaptureFixture[str]) -> None:
    from art_train.cli import build_parser, main

    assert build_parser().parse_args(["serve", "--replicas", "3"]).replicas == 3
    assert build_parser().parse_args(["serve"]).replicas == BackendConfig().replicas == 1
    assert build_parser().parse_args(["serve", "--replicas", "2", "--ray"]).ray  # replicas as Ray actors
    assert not build_parser().parse_args(["serve"]).ray and BackendConfig().replica_launcher == "local"
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--replicas", "0"])
    assert exc.value.code == 2 and "'0' is not a whole number >= 1" in capsys.readouterr().err


# -- the replica set on fake engines -----------------------------------------------------------------
class _Mortal(FunctionEngine):
    """A fake replica whose process can 'die': every call then raises `EngineUnavailable`."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(lambda m: "hi " + str(m[-1]["content"]))
        self.wait, self.dead = delay, False

    def alive(self) -> bool:
        return not self.dead

    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        await asyncio.sleep(self.wait)
        if self.dead:
            raise EngineUnavailable("connection reset")
        return await super().chat(request)

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        async for chunk in super().chat_stream(request):
            if self.dead:
                raise EngineUnavailable("connection reset")
            yield chunk


def _replica_set(n: int = 2, delay: float = 0.05) -> tuple[ReplicaSet, list[_Mortal]]:
    launched: list[_Mortal] = []

    async def launch(index: int) -> Engine:
        engine = _Mortal(delay)
        await engine.start()
        launched.append(engine)
        return engine

    return ReplicaSet(launch, n, wait_s=5), launched


def _request(text: str, adapter: str | None = None, session: str | None = None) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], model="m", adapter=adapter, session=session,
                       sampling=SamplingParams())


async def test_concurrent_requests_spread_and_a_trajectorys_turns_stay_on_one_replica() -> None:
    replicas, engines = _replica_set()
    await replicas.start()
    try:
        await asyncio.gather(*(replicas.chat(_request(f"q{i}")) for i in range(8)))
        assert [len(e.requests) for e in engines] == [4, 4]
        for turn in range(3):
            await asyncio.gather(*(replicas.chat(_request(f"t{i} {turn}", session=f"traj{i}")) for i in range(4)))
        for i in range(4):
            homes = {k for k, e in enumerate(engines) for r in e.requests if r.session == f"traj{i}"}
            assert len(homes) == 1, f"trajectory {i}'s turns went to replicas {homes}"
    finally:
        await replicas.stop()


async def test_a_request_goes_only_to_replicas_that_serve_its_adapter() -> None:
    replicas, engines = _replica_set()
    await replicas.start()
    try:
        for e in engines:
            await e.load_adapter("m@1", Path("ckpt/1"))
        replicas.serve(1, engines[1], "m@1")  # only replica 1 passed the check of step 1
        await asyncio.gather(*(replicas.chat(_request(f"q{i}", adapter="m@1")) for i in range(4)))
        assert len(engines[0].requests) == 0 and len(engines[1].requests) == 4
    finally:
        await replicas.stop()


async def test_a_dead_replica_is_taken_out_its_requests_retried_and_it_comes_back_after_the_rejoin() -> None:
    replicas, engines = _replica_set(delay=0.2)
    rejoined: list[Engine] = []

    async def rejoin(engine: Engine) -> list[str]:
        rejoined.append(engine)
        await engine.load_adapter("m@1", Path("ckpt/1"))
        return ["m@1"]

    replicas.add_rejoin(rejoin)
    await replicas.start()
    try:
        for i, e in enumerate(engines):
            await e.load_adapter("m@1", Path("ckpt/1"))
            replicas.serve(i, e, "m@1")
        calls = [asyncio.ensure_future(replicas.chat(_request(f"q{i}", adapter="m@1"))) for i in range(6)]
        await asyncio.sleep(0.05)
        engines[0].dead = True  # SIGKILL: its requests in flight fail with a reset connection
        answers = await asyncio.gather(*calls)
        assert len(answers) == 6
        assert all(a["choices"][0]["message"]["content"].startswith("hi q") for a in answers)
        r0 = replicas.replicas[0]
        assert r0.failures == 1
        for _ in range(100):
            if r0.up:
                break
            await asyncio.sleep(0.02)
        assert r0.up and r0.restarts == 1 and r0.adapters == {"m@1"}
        assert rejoined == [engines[2]] and r0.engine is engines[2]  # a new process, rejoined before serving
        assert engines[0].stopped
    finally:
        await replicas.stop()


async def test_a_stream_is_retried_only_before_its_first_chunk() -> None:
    replicas, engines = _replica_set(delay=0.2)
    await replicas.start()
    try:
        engines[0].dead = True  # dies before its first chunk: the stream is served by replica 1
        chunks = [c async for c in replicas.chat_stream(_request("a b c", session="s"))]
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "hi a b c"
        while not replicas.replicas[0].up:
            await asyncio.sleep(0.02)
        victim = replicas.router.sessions["id:s"]
        stream = replicas.chat_stream(_request("d e f g h", session="s"))
        first = await stream.__anext__()
        assert first["choices"]
        replicas.replicas[victim].engine.dead = True  # type: ignore[union-attr]
        with pytest.raises(EngineUnavailable, match="reply is incomplete"):
            async for _ in stream:
                pass
    finally:
        await replicas.stop()


async def test_when_no_replica_serves_the_adapter_a_request_waits_then_gets_a_503() -> None:
    replicas, _ = _replica_set()
    replicas.wait_s = 0.2
    await replicas.start()
    try:
        with pytest.raises(Exception, match="no replica of engine is up and serving m@9"):
            await replicas.chat(_request("q", adapter="m@9"))
    finally:
        await replicas.stop()


async def test_the_service_serves_replicas_over_http_with_the_trajectory_header_and_per_replica_metrics() -> None:
    import openai

    from art_train.server import create_app
    from art_train.service import ModelService
    from tests.support.net import serve_in_thread

    made: list[FunctionEngine] = []

    def make(model: art.Model) -> FunctionEngine:
        made.append(FunctionEngine(lambda m: "ok", delay=0.05))
        return made[-1]

    service = ModelService(BackendConfig(replicas=2), make_engine=make)
    await service.register(art.Model(name="judge", base_model="fake"))
    with serve_in_thread(create_app(service)) as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x")
        await asyncio.gather(*(client.chat.completions.create(
            model="judge", messages=[{"role": "user", "content": f"q{i}"}], extra_headers={"X-ART-Trajectory": f"t{i}"})
            for i in range(6)))
        assert len(made) == 2 and [len(e.requests) for e in made] == [3, 3]
        assert sorted(r.session for e in made for r in e.requests) == [f"t{i}" for i in range(6)]
        text = httpx.get(f"{url}/metrics").text
        assert 'art_replica_requests_total{engine="fake",replica="0"} 3.0' in text
        assert 'art_replica_up{engine="fake",replica="1"} 1.0' in text
    await service.close()
    assert all(e.stopped for e in made)


async def test_a_vllm_replica_reports_a_dropped_connection_instead_of_restarting_itself() -> None:
    from art_train.engines.vllm_engine import VLLMEngine
    from tests.support.net import free_port

    engine = VLLMEngine("/no/model", port=free_port(), restart=False)  # nothing listens there: as after a SIGKILL
    try:
        with pytest.raises(EngineUnavailable, match="did not answer"):
            await engine.chat(_request("q"))
    finally:
        await engine.stop()


# -- the swap over replicas, on fakes: per-replica check, take-out, rejoin ------------------------------
class _Trainer:
    """The trainer's side of the check: checkpoint k gives every probe token logprob -k."""

    def trained_ids(self, step: int) -> list[list[int]]:
        return []

    def sequences_logprobs(self, sequences: list[list[int]], step: int | None = None,
                           dtype: str | None = None) -> list[list[float]]:
        return [[-float(step or 0)] * (len(s) - 1) for s in sequences]

    def adapter_fingerprint(self, step: int | None = None) -> str:
        return f"fp{step}"

    def wait_saved(self) -> None:
        pass

    def adapter_pairs(self, step: int) -> None:
        return None


class _Served(_Mortal):
    """Serves checkpoint k as the trainer does, or (stale) always checkpoint 0's weights."""

    def __init__(self, stale: bool = False) -> None:
        super().__init__()
        self.stale = stale

    async def sequences_logprobs(self, sequences: list[list[int]], adapter: str | None) -> list[list[float]]:
        assert adapter is None or adapter in self.adapters, f"{adapter} is not loaded"
        step = 0 if self.stale or adapter is None else int(adapter.rpartition("@")[2])
        return [[-float(step)] * (len(s) - 1) for s in sequences]


async def _swap_over(stale: list[bool], tmp_path: Path) -> tuple[Any, ReplicaSet, list[_Served]]:
    from art_core import RunDir
    from art_train.gate import Gate
    from art_train.swap import Swap

    launched: list[_Served] = []

    async def launch(index: int) -> Engine:
        engine = _Served(stale=stale[len(launched)] if len(launched) < len(stale) else False)
        launched.append(engine)
        return engine

    replicas = ReplicaSet(launch, 2, wait_s=5)
    await replicas.start()
    rundir = RunDir("p", "m", tmp_path)
    for step in (0, 1):
        rundir.checkpoint_path(step).mkdir(parents=True)
    swap = Swap(name="m", rundir=rundir, engine=replicas, trainer=_Trainer(), probe=[1, 2, 3, 4, 5], tolerance=1e-3,
                probe_tokens=0, gate=Gate())
    await swap.load_and_verify(0)
    swap.step = 0
    return swap, replicas, launched


async def test_each_replica_is_checked_a_stale_one_is_taken_out_and_rejoins_verified(tmp_path: Path) -> None:
    swap, replicas, engines = await _swap_over([False, True], tmp_path)  # replica 1 loads but serves step 0
    try:
        metrics = await swap.after_step(1, {})
        assert metrics["weight_sync/replica_0/ok"] == 1.0 and metrics["weight_sync/replica_1/ok"] == 0.0
        assert metrics["weight_sync/replicas"] == 2.0 and metrics["weight_sync/replicas_ok"] == 1.0
        assert swap.step == 1 and replicas.replicas[1].failures == 1
        answers = await asyncio.gather(*(replicas.chat(_request(f"q{i}", adapter="m@1")) for i in range(4)))
        assert len(answers) == 4 and not any(r.adapter == "m@1" for r in engines[1].requests)  # never the stale one
        for _ in range(100):
            if replicas.replicas[1].up:
                break
            await asyncio.sleep(0.02)
        assert replicas.replicas[1].up and replicas.replicas[1].engine is engines[2]  # a fresh one, verified
        assert replicas.replicas[1].adapters == {"m@0", "m@1"} and set(engines[2].adapters) == {"m@0", "m@1"}
    finally:
        await replicas.stop()


async def test_a_restarted_replica_that_fails_the_check_stays_out(tmp_path: Path) -> None:
    swap, replicas, engines = await _swap_over([False, False, True, True], tmp_path)
    try:
        await swap.after_step(1, {})
        engines[1].dead = True  # replica 1 dies; its next two launches serve stale weights
        await asyncio.sleep(1.5)  # the monitor notices, the restart's rejoin check fails (then backs off)
        r1 = replicas.replicas[1]
        assert r1.failures == 1 and not r1.up and r1.restarts == 0 and len(engines) >= 3
        await replicas.chat(_request("q", adapter="m@1"))  # served by replica 0 meanwhile
    finally:
        await replicas.stop()


async def test_when_every_replica_fails_the_check_the_step_fails_and_the_previous_stays_served(tmp_path: Path) -> None:
    from art_train.errors import WeightSyncError

    swap, replicas, engines = await _swap_over([False, False], tmp_path)
    try:
        for e in engines:
            e.stale = True
        with pytest.raises(WeightSyncError, match="weight-sync check failed for m@1"):
            await swap.after_step(1, {})
        assert swap.step == 0 and all(r.up and r.adapters == {"m@0"} for r in replicas.replicas)
        assert all("m@1" not in e.adapters for e in engines)
    finally:
        await replicas.stop()


# -- real: two embedded-engine worker processes on the tiny model -------------------------------------
def _visible_devices(pid: int) -> str | None:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next((item[len(b"CUDA_VISIBLE_DEVICES="):].decode() for item in raw
                 if item.startswith(b"CUDA_VISIBLE_DEVICES=")), None)


@pytest.mark.parametrize(("settings", "message"), [
    ({"replicas": 3, "replica_devices": ["0", "1"]}, "has 2 entries for replicas=3"),
    ({"replicas": 1, "replica_devices": ["0", "1"]}, "has 2 entries for replicas=1"),
    ({"replicas": 2, "replica_devices": ["0", "1 2"]}, "not a CUDA_VISIBLE_DEVICES value"),
    ({"replicas": 2, "replica_devices": ["0", ""]}, "not a CUDA_VISIBLE_DEVICES value"),
    ({"replicas": 2, "replica_devices": ["0", "1"], "replica_launcher": "ray"}, "Ray assigns them"),
])
def test_bad_replica_devices_are_refused_by_name(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackendConfig(**settings)
    from art_train.cli import build_parser

    args = build_parser().parse_args(["serve", "--replicas", "2", "--replica-devices", "4,5", "6,7"])
    assert args.replica_devices == ["4,5", "6,7"]


async def test_two_worker_replicas_spread_verify_each_step_and_survive_a_sigkill(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    backend = LocalBackend(config=BackendConfig(path=tmp_path, device="cpu", replicas=2, sync_probe_tokens=64,
                                                replica_devices=["0", "1"]))  # GPUs per replica (none used here)
    model = art.TrainableModel(name="r", project="t", base_model=str(tiny_model_path),
                               config=art.ModelConfig(max_seq_len=512))
    try:
        await model.register(backend)
        (replicas,) = backend.service.replica_sets()
        assert [r.adapters for r in replicas.replicas] == [{"r@0"}, {"r@0"}]  # each verified at step 0
        assert [_visible_devices(r.engine.pid) for r in replicas.replicas] == ["0", "1"]  # type: ignore[union-attr]
        client = model.openai_client(max_retries=0)

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                messages: list[Any] = [{"role": "user", "content": f"q{i % 2}"}]
                for _ in range(2):  # two turns: the second goes where the first one's prefix is
                    r = await client.chat.completions.create(model="r", messages=messages, max_tokens=6, seed=i)
                    messages += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "go on"}]
            traj.reward = float(len(r.choices[0].message.content or "") % 3)
            return traj

        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(3 * g + i) for i in range(3)) for g in range(2)], show_progress=False)
        assert all(r.served > 0 for r in replicas.replicas), replicas.describe()
        ids = {t.id for g in groups for t in g.trajectories}
        assert {f"id:{i}" for i in ids} <= set(replicas.router.sessions)  # the client sent X-ART-Trajectory

        result = await model.train(groups, config=art.TrainConfig(learning_rate=5e-2), verbose=False)
        m = result.metrics
        assert result.step == 1
        assert m["weight_sync/replicas"] == m["weight_sync/replicas_ok"] == 2.0
        assert m["weight_sync/replica_0/ok"] == m["weight_sync/replica_1/ok"] == 1.0
        assert [r.adapters >= {"r@1"} for r in replicas.replicas] == [True, True]

        victim = replicas.replicas[0]
        pid = victim.engine.pid  # type: ignore[union-attr]
        calls = [asyncio.ensure_future(client.chat.completions.create(
            model="r", messages=[{"role": "user", "content": f"k{i}"}], max_tokens=48, extra_body={"ignore_eos": True}))
            for i in range(8)]
        deadline = time.monotonic() + 30
        while victim.inflight == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert victim.inflight > 0
        os.kill(pid, signal.SIGKILL)
        answers = await asyncio.gather(*calls)  # every one answered, by step 1, in full
        assert [a.model_extra["art_step"] for a in answers] == [1] * 8
        assert all(len(a.choices[0].model_extra["token_ids"]) == 48 for a in answers)
        assert victim.failures == 1

        deadline = time.monotonic() + 120
        while not victim.up and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert victim.up and victim.restarts == 1 and victim.engine.pid != pid  # type: ignore[union-attr]
        assert victim.adapters >= {"r@1"}  # loaded and verified again before it serves
        assert _visible_devices(victim.engine.pid) == "0"  # type: ignore[union-attr]  # its GPUs, after the restart
        lines = httpx.get(f"{backend.url}/metrics").text.splitlines()
        restarts = [x for x in lines if x.startswith("art_replica_restarts_total{") and 'replica="0"' in x]
        up = [x for x in lines if x.startswith("art_replica_up{")]
        assert len(restarts) == 1 and restarts[0].endswith(" 1.0") and len(up) == 2, lines
    finally:
        await backend.close()
