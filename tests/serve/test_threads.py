"""`art_train.threads`: each `to_thread` call on its own thread, so no torch OpenMP pool outlives its call; and
the engine's worker thread, which ends when idle for the same reason."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from art_train.engines.base import ChatRequest, SamplingParams
from art_train.engines.transformers.engine import TransformersEngine
from art_train.threads import FreshThreads, use_fresh_threads


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _parallel_work() -> float:
    x = torch.ones(4_000_000)  # large enough for torch to open a parallel region
    return float((x * 2).sum())


def _settled(target: int) -> int:
    deadline = time.monotonic() + 5
    while _os_threads() != target and time.monotonic() < deadline:
        time.sleep(0.02)
    return _os_threads()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or torch.get_num_threads() < 2,
                    reason="counts OS threads on Linux with more than one torch thread")
async def test_a_torch_call_leaves_no_thread_behind() -> None:
    use_fresh_threads()
    _parallel_work()  # this thread's own pool first, so that only the call's threads are counted
    before = _os_threads()
    assert await asyncio.to_thread(_parallel_work) == 8_000_000.0
    assert _settled(before) == before  # the call's thread and its OpenMP worker are gone

    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    await asyncio.to_thread(_parallel_work)
    assert _settled(before) > before  # what it guards against: a pooled worker keeps its pool


async def test_fresh_threads_run_each_call_on_a_new_thread_and_pass_errors_on() -> None:
    executor = FreshThreads()
    names = [executor.submit(lambda: threading.current_thread()).result() for _ in range(2)]
    assert names[0] is not names[1]
    assert threading.main_thread() not in names

    def boom() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        executor.submit(boom).result()

    release = threading.Event()
    slow = executor.submit(release.wait, 5)
    threading.Timer(0.1, release.set).start()
    executor.shutdown(wait=True)  # waits for calls still running
    assert slow.done() and slow.result() is True


async def test_an_idle_engine_ends_its_thread_and_the_next_request_starts_another(tiny_model_path: Path) -> None:
    engine = TransformersEngine(tiny_model_path, dtype="float32", idle_s=0.2, prefix_cache_mb=0)
    await engine.start()

    async def reply() -> int:
        request = ChatRequest(messages=[{"role": "user", "content": "hi"}], model="m",
                              sampling=SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))
        return (await asyncio.wait_for(engine.chat(request), 60))["usage"]["completion_tokens"]

    try:
        first = engine.scheduler.thread
        assert first is not None and first.name == "art-engine"  # the thread that loaded the model
        assert await reply() == 2
        first.join(10)
        assert not first.is_alive() and engine.scheduler.thread is None  # ended once idle, its OpenMP pool with it
        assert await reply() == 2
        second = engine.scheduler.thread
        assert second is not None and second is not first and second.name == "art-engine"
        for delay in (0.15, 0.19, 0.2, 0.21, 0.25, 0.3):  # around the moment a worker ends: nothing is lost
            await asyncio.sleep(delay)
            assert await reply() == 2
        await asyncio.sleep(0.5)
        assert len((await asyncio.wait_for(engine.sequences_logprobs([[1, 5, 9]], None), 60))[0]) == 2  # probes too
    finally:
        await asyncio.wait_for(engine.stop(), 60)
    assert engine.scheduler.thread is None or not engine.scheduler.thread.is_alive()
