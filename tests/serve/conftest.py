"""Fixtures for serving tests: a real `art serve` process on the tiny model (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.net import free_port
from tests.support.process import stop

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def art_serve(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path) -> Iterator[str]:
    """A real `art serve` subprocess on loopback; yields its URL."""
    port = free_port()
    home = tmp_path_factory.mktemp("serve-home")
    log = open(home / "serve.log", "w")  # noqa: SIM115
    env = {**os.environ, "ART_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "art_train.cli", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"art serve exited: {(home / 'serve.log').read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        raise RuntimeError("art serve did not start in 90 s")
    yield url
    stop(proc)
    log.close()
