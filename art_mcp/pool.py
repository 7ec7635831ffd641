"""Server processes for many rollouts: a fresh one per rollout, or one shared, never more than a bound.

`isolation="per_rollout"` gives each rollout its own server process, started in its own empty
temporary directory that is removed when the rollout ends; `"shared"` reuses one process (and one
directory) for every rollout (cheaper; right for stateless servers). `max_processes` bounds the live
processes; a rollout that would pass it waits. With `prewarm`, spare per-rollout processes are
started ahead of time so a rollout does not wait for the spawn and handshake (they count against
the bound).

What a fresh process isolates: its memory (an in-memory database starts empty) and every file it
writes under a relative path or under the rollout directory. The directory is the process's working
directory (unless the spec sets `cwd`) and ``$ART_ROLLOUT_DIR``, and ``{rollout_dir}`` in the
command, arguments, env values or cwd is replaced by it, so a file-backed server is pointed at a
per-rollout file with e.g. ``["mcp-server-sqlite", "--db-path", "{rollout_dir}/db.sqlite"]``. A
spec may also be a function of the directory (``lambda d: [...]``). Not isolated: absolute paths
the server picks itself (``~/.config/...``), and external services it talks to.

For a streamable-HTTP URL, "per_rollout" opens a fresh MCP session per rollout; whether state is
isolated then depends on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import Literal

from .session import DEFAULT_MAX_OUTPUT_CHARS, Connection, McpSession, ServerSpec, resolve_server

logger = logging.getLogger(__name__)

Isolation = Literal["per_rollout", "shared"]
ServerFactory = Callable[[str], ServerSpec]  # the rollout directory -> the server to start there


class ServerPool:
    """Hands out MCP sessions to rollouts under an isolation policy and a process bound.

    Example:
        async with ServerPool("python -m art_mcp.servers.notes", max_processes=4) as pool:
            async with pool.session() as session:
                traj = await art_mcp.rollout(model, session, task)
    """

    def __init__(
        self,
        server: ServerSpec | ServerFactory,
        *,
        isolation: Isolation = "per_rollout",
        max_processes: int = 4,
        prewarm: int = 0,
        timeout: float | None = 30.0,
        startup_timeout: float = 60.0,
        max_output_chars: int | None = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        if isolation not in ("per_rollout", "shared"):
            raise ValueError(f"isolation must be 'per_rollout' or 'shared', got {isolation!r}")
        if max_processes < 1:
            raise ValueError(f"max_processes must be at least 1, got {max_processes}")
        if not 0 <= prewarm <= max_processes:
            raise ValueError(f"prewarm must be between 0 and max_processes ({max_processes}), got {prewarm}")
        if not callable(server):
            resolve_server(server)  # a bad spec fails here, not in every rollout
        self.server = server
        self.isolation = isolation
        self.max_processes = max_processes
        self.prewarm = prewarm if isolation == "per_rollout" else 0
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.max_output_chars = max_output_chars
        self.live = 0  # connections open or opening
        self.peak = 0
        self.started = 0
        self._slots = asyncio.Semaphore(max_processes)
        self._spares: list[asyncio.Task[tuple[Connection, McpSession]]] = []
        self._shared: tuple[Connection, McpSession] | None = None
        self._shared_lock = asyncio.Lock()
        self._closing: set[asyncio.Future[None]] = set()
        self._connections: set[Connection] = set()  # every one opening or open
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
        """Open one connection in a fresh directory; the caller holds a slot."""
        if self._closed:
            self._slots.release()
            raise RuntimeError("this ServerPool is closed; make a new one")
        self.live += 1
        self.started += 1
        self.peak = max(self.peak, self.live)
        workdir: str | None = None
        try:
            spec = self.server
            if callable(spec) or not isinstance(resolve_server(spec), str):  # a process: give it a directory
                workdir = tempfile.mkdtemp(prefix="art-mcp-rollout-")
                if callable(spec):
                    spec = spec(workdir)
            connection = Connection(
                spec,
                timeout=self.timeout,
                startup_timeout=self.startup_timeout,
                max_output_chars=self.max_output_chars,
                workdir=workdir,
            )
        except BaseException:
            self._discard(None, workdir)
            raise
        self._connections.add(connection)
        try:
            return connection, await connection.open()
        except BaseException:
            self._discard(connection, workdir)
            raise

    def _discard(self, connection: Connection | None, workdir: str | None) -> None:
        """Undo `_open` for a connection that did not open, or has stopped; once per connection
        (a failed opener and close() can both get here)."""
        if connection is not None:
            if connection not in self._connections:
                return
            self._connections.discard(connection)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        self.live -= 1
        self._slots.release()

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
        if connection not in self._connections:
            return  # released already (close() stopped it under a running rollout)
        try:
            await connection.close()
        finally:
            self._discard(connection, connection.workdir)
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
        """Stop every server process the pool started and remove their directories.

        Returns once every process has exited, spares and servers still starting included; a
        rollout still holding a session sees `ServerCrashed` on its next call.
        """
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
        while self._connections:  # rollouts that never gave theirs back, or are still starting one
            await asyncio.gather(*(self._release(c) for c in list(self._connections)), return_exceptions=True)


__all__ = ["Isolation", "ServerPool"]
