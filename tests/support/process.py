"""Stopping a child process a test started: SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import subprocess

__all__ = ["stop"]


def stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    """Terminate `proc` and wait up to `timeout` seconds for it to exit; kill it if it has not."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
