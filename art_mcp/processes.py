"""Every process a stdio server started goes when its connection closes.

The SDK stops the server itself (closes its stdin, waits, kills its process group only if the
server lingers), so a child the server started outlives a server that exits promptly: re-parented
to init, it runs on after the pool is gone. Each server is started with a marker in its
environment (``ART_MCP_SERVER=<token>``), which its children inherit; on close, its process group
and every process still carrying the marker (a child that left the group with its own session
included) get SIGTERM, then SIGKILL after a grace period. Linux only (it reads /proc); elsewhere
closing does what the SDK does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

from mcp.client.stdio import StdioServerParameters

__all__ = ["MARK", "mark", "marked", "stop_marked"]

MARK = "ART_MCP_SERVER"
_PROC = Path("/proc")


def mark(target: StdioServerParameters) -> tuple[StdioServerParameters, str]:
    """`target` with a fresh marker in its environment, and the marker."""
    token = uuid.uuid4().hex
    return target.model_copy(update={"env": {**(target.env or {}), MARK: token}}), token


def marked(token: str) -> list[int]:
    """The pids of live processes whose environment carries `token` (own user's only: /proc)."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal_all(pids: list[int], group: int | None, sig: signal.Signals) -> None:
    if group is not None:
        with contextlib.suppress(OSError):
            os.killpg(group, sig)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _stop(token: str, group: int | None, grace: float) -> int:
    pids = [p for p in marked(token) if p != os.getpid()]
    if not pids and group is None:
        return 0
    _signal_all(pids, group, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.02)
    left = [p for p in pids if _alive(p)]
    if left:
        _signal_all(left, group, signal.SIGKILL)
    return len(pids)


async def stop_marked(token: str, group: int | None, grace: float = 2.0) -> int:
    """SIGTERM the server's process group `group` and every process carrying `token`, SIGKILL what
    is left after `grace` seconds; how many marked processes there were."""
    return await asyncio.to_thread(_stop, token, group, grace)
