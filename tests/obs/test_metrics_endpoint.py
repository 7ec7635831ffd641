"""`/metrics` of the HTTP server, scraped: after the real run, while training holds inference, and from `art serve`."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import art_core as art
from tests.support.process import stop

from .conftest import Run

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_after_a_training_run(run: Run) -> None:
    got = samples(run.metrics_text)
    model = (("model", "obs-run"),)
    chat_ok = (("method", "POST"), ("route", "/v1/chat/completions"), ("status", "200"))
    assert got[("art_http_requests_total", chat_ok)] == 2 * 8 + 4  # every rollout's one chat completion
    assert got[("art_http_request_duration_seconds_count", (("route", "/v1/chat/completions"),))] == 20
    assert got[("art_step", model)] == 2
    assert got[("art_held", model)] == 0
    assert got[("art_held_seconds_total", model)] > 0  # two training steps held inference
    assert got[("art_completion_tokens_total", model)] >= 20  # max_tokens=8 per call, at least one each
    assert got[("art_prompt_tokens_total", model)] > 0
    assert got[("art_tokens_per_second", model)] == pytest.approx(got[("art_completion_tokens_total", model)] / 60)
    assert got[("art_queue_depth", ())] == 0 and got[("art_engine_inflight", model)] == 0


async def test_queue_depth_and_held_while_training_holds(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from art_train import LocalBackend
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama")
    backend = LocalBackend(path=tmp_path)
    model = art.TrainableModel(name="held", project="obs", base_model=str(tiny))
    try:
        await model.register(backend)
        gate = backend.service.entry("held").gate
        scrape = lambda: samples(httpx.get(f"{backend.url}/metrics").text)  # noqa: E731
        asyncio.run_coroutine_threadsafe(gate.hold(), backend._loop).result(5)  # what a training step does
        body = {"model": "held", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        answers: list[int] = []
        waiter = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{backend.url}/v1/chat/completions", json=body, timeout=30).status_code))
        waiter.start()
        deadline = time.time() + 10
        while scrape()[("art_queue_depth", ())] < 1 and time.time() < deadline:
            await asyncio.sleep(0.05)
        got = scrape()
        assert got[("art_queue_depth", ())] == 1 and got[("art_held", (("model", "held"),))] == 1
        assert got[("art_chat_requests_in_progress", ())] == 1
        time.sleep(0.3)
        backend._loop.call_soon_threadsafe(gate.resume)
        waiter.join(30)
        assert answers == [200]
        got = scrape()
        assert got[("art_queue_depth", ())] == 0 and got[("art_held", (("model", "held"),))] == 0
        assert got[("art_held_seconds_total", (("model", "held"),))] >= 0.3
    finally:
        await backend.close()


def test_art_serve_exposes_metrics_behind_its_api_key(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "ART_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "art_train.cli", "serve", "--port", str(port), "--api-key", "k",
                             "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            assert proc.poll() is None and time.time() < deadline, "art serve did not start"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert httpx.get(f"{url}/metrics").status_code == 401
        httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer k"})
        r = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        got = samples(r.text)
        assert got[("art_http_requests_total", (("method", "GET"), ("route", "/v1/models"), ("status", "200")))] == 1
        assert got[("art_http_requests_total", (("method", "GET"), ("route", "/metrics"), ("status", "401")))] == 1
        assert got[("art_queue_depth", ())] == 0
    finally:
        stop(proc)
