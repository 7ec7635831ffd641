"""Server processes for many rollouts: a fresh one per rollout, or one shared, never more than a bound.

`isolation="per_rollout"` gives each rollout its own server process (a stateful server, such as a
database or a file store, starts clean every time); `"shared"` reuses one process for every
rollout (cheaper; right for stateless servers). `max_processes` bounds the live processes; a
rollout that would pass it waits. With `prewarm`, spare per-rollout processes are started ahead of
time so a rollout does not wait for the spawn and handshake (they count against the bound).

For a streamable-HTTP URL, "per_rollout" opens a fresh MCP session per rollout; whether state is
isolated then depends on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Literal

from .session import Connection, McpSession, ServerSpec

logger = logging.getLogger(__name__)

Isolation = Literal["per_rollout", "shared"]


class ServerPool:
    """Hands out MCP sessions to rollouts under an isolation policy and a process bound.

    Example:
        async with ServerPool("python -m art_mcp.servers.notes", max_processes=4) as pool:
            async with pool.session() as session:
                traj = await art_mcp.rollout(model, session, task)
    """

    def __init__(
        self,
        server: ServerSpec,
        *,
        isolation: Isolation = "per_rollout",
        max_processes: int = 4,
        prewarm: int = 0,
        timeout: float | None = 30.0,
        startup_timeout: float = 60.0,
    ) -> None:
        if isolation not in ("per_rollout", "shared"):
            raise ValueError(f"isolation must be 'per_rollout' or 'shared', got {isolation!r}")
        if max_processes < 1:
            raise ValueError(f"max_processes must be at least 1, got {max_processes}")
        if not 0 <= prewarm <= max_processes:
            raise ValueError(f"prewarm must be between 0 and max_processes ({max_processes}), got {prewarm}")
        self.server = server
        self.isolation = isolation
        self.max_processes = max_processes
        self.prewarm = prewarm if isolation == "per_rollout" else 0
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.live = 0  # connections open or opening
        self.peak = 0
        self.started = 0
        self._slots = asyncio.Semaphore(max_processes)
        self._spares: list[asyncio.Task[tuple[Connection, McpSession]]] = []
        self._shared: tuple[Connection, McpSession] | None = None
        self._shared_lock = asyncio.Lock()
        self._closing: set[asyncio.Future[None]] = set()
        self._closed = False

    async def __aenter__(self) -> ServerPool:
        self._refill()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[McpSession]:
        """A session for one rollout; with per-rollout isolation its process stops afterwards."""
        if self._closed:
            raise RuntimeError("this ServerPool is closed; make a new one")
        if self.isolation == "shared":
            yield await self._shared_session()
            return
        connection, session = await self._take()
        try:
            yield session
        finally:
            # stop the process in the background: the rollout need not wait for it to exit, and
            # the slot stays taken until it has (close() waits for these)
            closing = asyncio.ensure_future(self._release(connection))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _open(self) -> tuple[Connection, McpSession]:
        """Open one connection; the caller holds a slot."""
        self.live += 1
        self.started += 1
        self.peak = max(self.peak, self.live)
        connection = Connection(self.server, timeout=self.timeout, startup_timeout=self.startup_timeout)
        try:
            return connection, await connection.open()
        except BaseException:
            self.live -= 1
            self._slots.release()
            raise

    async def _take(self) -> tuple[Connection, McpSession]:
        while self._spares:
            spare = self._spares.pop(0)
            try:
                taken = await spare
            except Exception as exc:  # a failed spare: log it and try the next (or a fresh one)
                logger.warning("a prewarmed MCP server failed to start: %r", exc)
                continue
            self._refill()
            return taken
        await self._slots.acquire()
        taken = await self._open()
        self._refill()
        return taken

    async def _release(self, connection: Connection) -> None:
        try:
            await connection.close()
        finally:
            self.live -= 1
            self._slots.release()
            self._refill()

    def _refill(self) -> None:
        """Start spare processes up to `prewarm`; each waits for a free slot, so spares keep to the bound."""
        if self._closed:
            return
        while len(self._spares) < self.prewarm and not self._slots.locked():
            self._spares.append(asyncio.ensure_future(self._spare()))

    async def _spare(self) -> tuple[Connection, McpSession]:
        await self._slots.acquire()
        return await self._open()

    async def _shared_session(self) -> McpSession:
        async with self._shared_lock:
            if self._shared is not None and self._shared[1].crashed is not None:
                logger.warning("the shared MCP server %s crashed; starting a new one", self._shared[0].label)
                connection, self._shared = self._shared[0], None
                await self._release(connection)
            if self._shared is None:
                await self._slots.acquire()
                self._shared = await self._open()
            return self._shared[1]

    async def close(self) -> None:
        """Stop every server process the pool started (spares and the shared one)."""
        self._closed = True
        spares, self._spares = self._spares, []
        for spare in spares:
            if not spare.done():
                spare.cancel()  # one still opening stops its server itself (Connection.open)
        for spare in spares:
            try:
                connection, _ = await spare
            except (Exception, asyncio.CancelledError):
                continue
            await self._release(connection)
        if self._shared is not None:
            connection, self._shared = self._shared[0], None
            await self._release(connection)
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)


__all__ = ["Isolation", "ServerPool"]
