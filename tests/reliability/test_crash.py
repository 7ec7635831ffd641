"""kill -9 of `art serve` at three points, then a restart on the same run directory.

After each: no trajectory is lost, training resumes at the right step, the served step is the newest
complete checkpoint, and a `RemoteBackend.train` call that was cut off is retried and trains its
groups exactly once (its step id makes the call idempotent).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import openai
import pytest

import art_core as art
from tests.reliability.conftest import MAX_SEQ_LEN, Served, start_serve

pytestmark = pytest.mark.timeout(600)

WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing in the old oak tree".split()


def groups(n_groups: int, size: int, words: int, seed: int) -> list[art.TrajectoryGroup]:
    """Trajectories with long assistant turns (re-tokenized from text), so a step takes a while."""
    out = []
    for g in range(n_groups):
        trajs = []
        for i in range(size):
            text = " ".join(WORDS[(seed + g + i * 7 + k) % len(WORDS)] for k in range(words))
            trajs.append(art.Trajectory(messages=[{"role": "user", "content": f"task {seed}-{g}"},
                                                  {"role": "assistant", "content": text}], reward=float(i % 2)))
        out.append(art.TrajectoryGroup(trajs))
    return out


def ids(gs: list[art.TrajectoryGroup]) -> set[str]:
    return {t.id for g in gs for t in g.trajectories}


class Harness:
    def __init__(self, home: Path, tiny: Path) -> None:
        self.home, self.tiny = home, tiny
        self.server: Served = start_serve(home)
        self.rundir = home / "crash" / "models" / "m"
        self.backend = art.RemoteBackend(self.server.url, restart_timeout=120)
        self.model = art.TrainableModel(name="m", project="crash", base_model=str(tiny),
                                        config=art.ModelConfig(max_seq_len=MAX_SEQ_LEN))

    def kill_and_restart(self) -> float:
        """SIGKILL the server's process group, start a new one on the same port; seconds it was down."""
        t0 = time.perf_counter()
        self.server.kill()
        self.server = start_serve(self.home, self.server.port)
        return time.perf_counter() - t0

    def history(self) -> list[dict]:
        path = self.rundir / "history.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def trained_rows(self, step: int) -> list[dict]:
        return [r for r in self.history() if r.get("step") == step and "kind" in r]

    def saved_ids(self, step: int) -> set[str]:
        path = self.rundir / "trajectories" / "train" / f"{step:04d}.jsonl"
        return {t["id"] for line in path.read_text().splitlines() for t in json.loads(line)["trajectories"]}

    def served_step(self) -> int:
        r = httpx.post(f"{self.server.url}/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        assert r.status_code == 200, r.text
        return r.json()["art_step"]

    def newest_checkpoint(self) -> int:
        return max(int(p.name) for p in (self.rundir / "checkpoints").iterdir() if p.name.isdigit())

    async def wait_for(self, condition, timeout: float = 120) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "the kill point never came"
            await asyncio.sleep(0.002)

    async def connect(self) -> None:
        """A RemoteBackend for this test's event loop (each test has its own), the model registered on it."""
        self.backend = art.RemoteBackend(self.server.url, restart_timeout=120)
        await self.model.register(self.backend)

    def close(self) -> None:
        self.server.kill()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path):
    """One run directory for the three kills, in order: each test starts where the last one left off."""
    h = Harness(tmp_path_factory.mktemp("crash"), tiny_model_path)
    try:
        async def first_step() -> int:
            await h.connect()
            result = await h.model.train(groups(2, 4, 20, seed=1), config=LR, verbose=False)
            await h.backend.close()
            return result.step

        assert asyncio.run(first_step()) == 1
        yield h
    finally:
        h.close()


LR = art.TrainConfig(learning_rate=1e-3, train_unsampled_turns=True)  # the turns are hand-built, not sampled


async def test_kill_during_rollouts(harness: Harness) -> None:
    await harness.connect()
    step = await harness.model.get_step()
    client = openai.AsyncOpenAI(base_url=f"{harness.server.url}/v1", api_key="x", max_retries=0)

    async def rollout(i: int):  # noqa: ANN202
        return await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"story {i}"}],
                                                    max_tokens=200, seed=i, extra_body={"ignore_eos": True})

    inflight = [asyncio.ensure_future(rollout(i)) for i in range(16)]
    await asyncio.sleep(0.5)  # requests are decoding
    assert not any(t.done() for t in inflight)
    await asyncio.to_thread(harness.kill_and_restart)
    results = await asyncio.gather(*inflight, return_exceptions=True)
    assert all(isinstance(r, openai.APIConnectionError) for r in results), results  # failed, not hung
    # the new process knows the model again by name (from its run directory) and serves the newest step
    assert harness.served_step() == harness.newest_checkpoint() == step
    assert harness.saved_ids(step) and len(harness.trained_rows(step)) == 1
    assert await harness.model.get_step() == step  # a loop resumed from get_step() goes on from here
    again = groups(2, 4, 20, seed=2)
    assert (await harness.model.train(again, config=LR, verbose=False)).step == step + 1
    assert harness.saved_ids(step + 1) == ids(again)
    await harness.backend.close()


async def test_kill_mid_optimizer_step(harness: Harness) -> None:
    await harness.connect()
    step = await harness.model.get_step() + 1
    batch = groups(4, 8, 100, seed=3)  # 32 long trajectories: the step takes long enough to be cut
    pending = harness.rundir / "train_pending.json"
    call = asyncio.ensure_future(harness.model.train(batch, config=LR, verbose=False))
    await harness.wait_for(pending.exists)
    await asyncio.sleep(0.1)  # into forward/backward
    assert not (harness.rundir / "checkpoints" / f"{step:04d}").exists(), "the step ended before the kill"
    await asyncio.to_thread(harness.kill_and_restart)
    assert harness.saved_ids(step) == ids(batch)  # journalled before training: nothing lost
    result = await call  # RemoteBackend retried with the same step id
    assert result.step == step
    assert len(harness.trained_rows(step)) == 1  # trained once: finished from the journal, the retry found it
    assert not pending.exists()
    assert await harness.model.get_step() == step == harness.served_step() == harness.newest_checkpoint()
    await harness.backend.close()


async def test_kill_during_adapter_load_and_verify(harness: Harness) -> None:
    await harness.connect()
    step = await harness.model.get_step() + 1
    batch = groups(2, 4, 60, seed=5)
    ckpt = harness.rundir / "checkpoints" / f"{step:04d}"
    call = asyncio.ensure_future(harness.model.train(batch, config=LR, verbose=False))
    await harness.wait_for(ckpt.exists)  # saved: the service now loads it into the engine and verifies
    harness.server.kill()
    answered_before_kill = call.done()
    await asyncio.to_thread(lambda: setattr(harness, "server", start_serve(harness.home, harness.server.port)))
    result = await call
    assert result.step == step and len(harness.trained_rows(step)) == 1  # not trained again, history complete
    assert harness.saved_ids(step) == ids(batch)
    assert await harness.model.get_step() == step == harness.served_step() == harness.newest_checkpoint()
    assert not answered_before_kill
    nxt = await harness.model.train(groups(2, 4, 20, seed=6), config=LR, verbose=False)
    assert nxt.step == step + 1 and len(harness.trained_rows(step + 1)) == 1
    await harness.backend.close()


async def test_kill_mid_async_step(harness: Harness) -> None:
    # async mode: inference is served while the step trains; a kill then loses nothing and trains nothing twice
    await harness.connect()
    step = await harness.model.get_step() + 1
    batch = groups(4, 8, 100, seed=7)
    pending = harness.rundir / "train_pending.json"
    config = art.TrainConfig(learning_rate=1e-3, mode="async", train_unsampled_turns=True)  # hand-built turns
    call = asyncio.ensure_future(harness.model.train(batch, config=config, verbose=False))
    await harness.wait_for(pending.exists)
    served_during_step = await asyncio.to_thread(harness.served_step)  # not held: answered while it trains
    assert served_during_step == step - 1
    assert not (harness.rundir / "checkpoints" / f"{step:04d}").exists(), "the step ended before the kill"
    await asyncio.to_thread(harness.kill_and_restart)
    assert harness.saved_ids(step) == ids(batch)  # journalled before training: nothing lost
    result = await call  # RemoteBackend retried with the same step id
    assert result.step == step
    rows = harness.trained_rows(step)
    assert len(rows) == 1 and "off_policy/dropped" in rows[0]  # trained once, from the journal, in async mode
    assert not pending.exists()
    assert await harness.model.get_step() == step == harness.served_step() == harness.newest_checkpoint()
    await harness.backend.close()
