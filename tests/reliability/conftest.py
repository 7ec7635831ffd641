"""Fixtures for the reliability suite: a real `art serve` process serving a tiny random Llama."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_REQUEST_MB = 1  # the served process refuses bodies over 1 MB, so the huge-body case stays cheap
MAX_SEQ_LEN = 256  # the tiny model's context, so a too-long prompt is cheap to build


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from art_train.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama")


@dataclass
class Served:
    """A running `art serve`: its URL, run-directory root, process and log file."""

    url: str
    home: Path
    proc: subprocess.Popen
    log: Path
    port: int

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (the server and any engine it spawned)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def start_serve(home: Path, port: int | None = None, *extra: str, timeout: float = 120) -> Served:
    """Start `art serve` on loopback with `home` as its run-directory root; wait for /health."""
    port = port or free_port()
    log = home / f"serve-{port}-{time.time_ns()}.log"
    env = {**os.environ, "ART_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "art_train.cli", "serve", "--port", str(port), "--log-level", "warning",
             "--max-request-mb", str(MAX_REQUEST_MB), *extra],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"art serve exited with {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return Served(url, home, proc, log, port)
        except httpx.HTTPError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"art serve did not answer /health in {timeout:g} s: {log.read_text()[-3000:]}")


def register_tiny(url: str, tiny_model_path: Path, name: str = "rel", project: str = "reliability") -> dict:
    body = {"name": name, "project": project, "base_model": str(tiny_model_path), "trainable": True,
            "config": {"max_seq_len": MAX_SEQ_LEN}}
    r = httpx.post(f"{url}/art/v1/models/register", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path) -> Iterator[Served]:
    """One `art serve` per test module, with the tiny model registered as trainable model ``rel``."""
    server = start_serve(tmp_path_factory.mktemp("art-home"))
    try:
        register_tiny(server.url, tiny_model_path)
        yield server
    finally:
        if server.alive():
            server.proc.terminate()
            try:
                server.proc.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()


def assert_still_serving(url: str, model: str = "rel") -> None:
    """The process answers /health and a one-token chat completion."""
    assert httpx.get(f"{url}/health", timeout=10).json() == {"status": "ok"}
    r = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                   json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert r.status_code == 200, r.text
