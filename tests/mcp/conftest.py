from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

FLAKY = [sys.executable, str(Path(__file__).with_name("flaky_server.py"))]


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.fixture
def flaky() -> list[str]:
    return list(FLAKY)


@contextlib.contextmanager
def notes_over_http() -> Iterator[tuple[str, subprocess.Popen]]:
    """The bundled notes server over streamable HTTP on a free loopback port: (URL, process)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "art_mcp.servers.notes", "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"the notes HTTP server exited with code {proc.returncode}") from None
                time.sleep(0.1)
        else:
            raise RuntimeError("the notes HTTP server did not start listening within 30 s")
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def notes_http() -> Iterator[str]:
    with notes_over_http() as (url, _):
        yield url
