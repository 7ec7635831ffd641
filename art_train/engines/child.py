"""An engine's own server process: a free port to give it, its share of the cores, and stopping it with its
process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess

__all__ = ["core_share", "free_port", "stop_group"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def stop_group(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
    """SIGTERM `proc`'s process group (started with ``start_new_session``: the pid and its children), SIGKILL
    it if it is still there after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def core_share(cpus: list[int], replicas: int, index: int) -> list[int]:
    """Replica `index`'s cores: `cpus` cut into `replicas` equal runs ([0, 1, 2, 3], 2 replicas -> [0, 1] and
    [2, 3]; a remainder is left unused), or one core each in turn when there are more replicas than cores."""
    per = len(cpus) // max(1, replicas)
    if per == 0:
        return [cpus[index % len(cpus)]] if cpus else []
    return cpus[index * per:(index + 1) * per]
