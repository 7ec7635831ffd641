"""Stopping a child process a test started: SIGTERM, a grace period, then SIGKILL; or SIGKILL once it
reaches a point it marks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["kill_at_marker", "stop"]


def kill_at_marker(code: str, args: list[str], marker: Path, *, timeout: float = 180,
                   env: dict[str, str] | None = None) -> None:
    """Run ``python -c code *args``, wait until it creates `marker`, then SIGKILL it (kill -9)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    try:
        deadline = time.time() + timeout
        while not marker.exists():
            assert proc.poll() is None, f"the child exited ({proc.returncode}) before it wrote {marker.name}"
            assert time.time() < deadline, f"the child never wrote {marker.name} in {timeout:.0f} s"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    """Terminate `proc` and wait up to `timeout` seconds for it to exit; kill it if it has not."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
