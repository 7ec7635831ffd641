"""The two lines of the mcp SDK, 1.x and 2.x, behind one small surface.

Everything else in `art_mcp` speaks to the SDK through these names, so the differences live here:

| | mcp 1.x (1.30) | mcp 2.x (2.3) |
|---|---|---|
| error raised by requests | `mcp.shared.exceptions.McpError` | `mcp.shared.exceptions.MCPError` |
| a request that timed out | code 408 (`httpx.codes.REQUEST_TIMEOUT`) | code -32001 (`mcp_types.REQUEST_TIMEOUT`) |
| model fields | camelCase (`inputSchema`, `structuredContent`, `isError`, `nextCursor`) | snake_case |
| `call_tool(read_timeout_seconds=)` | a `timedelta` (unused: `call_tool` keeps its own clock) | seconds (a float) |
| streamable-HTTP client | yields (read, write, get_session_id) | yields (read, write) |
| an HTTP server that went away | the pending request waits out its timeout | the request fails at once |

langchain-mcp-adapters 0.3 and mcp-server-sqlite need mcp 1.x; `scripts/setup_mcp1.sh` makes a
virtualenv with it and CI runs tests/mcp and tests/graph there too. Servers written with the SDK
import `art_mcp.servers.sdk` instead (it must not import this package: a spawn would pay for it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import mcp.shared.exceptions as _exceptions
import mcp.types as mcp_types
from mcp.client import streamable_http as _streamable_http

MCP2 = hasattr(_exceptions, "MCPError")
"""True under mcp 2.x, False under 1.x."""

MCPError: type[Exception] = _exceptions.MCPError if MCP2 else _exceptions.McpError  # type: ignore[attr-defined]
CONNECTION_CLOSED = -32000  # the same code in both lines
REQUEST_TIMEOUT = -32001 if MCP2 else 408


def error_code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of an SDK error (None for anything else)."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


def error_message(exc: BaseException) -> str:
    error = getattr(exc, "error", None)
    return str(getattr(error, "message", None) or exc)


def _field(obj: Any, snake: str, camel: str) -> Any:
    return getattr(obj, snake) if MCP2 else getattr(obj, camel)


def input_schema(tool: mcp_types.Tool) -> dict[str, Any] | None:
    return _field(tool, "input_schema", "inputSchema")


def read_only_hint(tool: mcp_types.Tool) -> bool | None:
    """The tool's `readOnlyHint` annotation (None when the server gives none)."""
    annotations = getattr(tool, "annotations", None)
    return None if annotations is None else _field(annotations, "read_only_hint", "readOnlyHint")


def structured_content(result: mcp_types.CallToolResult) -> dict[str, Any] | None:
    return _field(result, "structured_content", "structuredContent")


def is_error(result: mcp_types.CallToolResult) -> bool:
    return bool(_field(result, "is_error", "isError"))


def task_support(tool: mcp_types.Tool) -> str | None:
    """A tool's ``execution.taskSupport`` ("forbidden", "optional", "required"), or None."""
    execution = getattr(tool, "execution", None)
    if execution is None:
        extra = getattr(tool, "model_extra", None) or {}  # a 1.x release that predates the field
        execution = extra.get("execution")
    if isinstance(execution, dict):
        return execution.get("taskSupport") or execution.get("task_support")
    return getattr(execution, "task_support", None) or getattr(execution, "taskSupport", None)


def next_cursor(page: mcp_types.ListToolsResult) -> str | None:
    return _field(page, "next_cursor", "nextCursor")


async def call_tool(
    client: Any,
    name: str,
    arguments: dict[str, Any],
    timeout: float | None,
    lost: asyncio.Event | None = None,
) -> mcp_types.CallToolResult:
    """`ClientSession.call_tool`, bounded by `timeout` seconds without a result or a progress
    notification: each progress notification from the server restarts the clock, so a long tool
    that reports progress is not cut off. Raises `TimeoutError` when the clock runs out.

    With `lost` (mcp 1.x over HTTP, see `streamable_http`), a connection lost during the call
    raises `ConnectionError` at once instead of waiting out the timeout.
    """
    loop = asyncio.get_running_loop()
    last = [loop.time()]

    async def on_progress(*_: Any) -> None:  # (progress, total, message): the same in both lines
        last[0] = loop.time()

    call = asyncio.ensure_future(client.call_tool(name, arguments, progress_callback=on_progress))
    watch = asyncio.ensure_future(lost.wait()) if lost is not None else None
    try:
        while True:
            left = None if timeout is None else last[0] + timeout - loop.time()
            if left is not None and left <= 0:
                raise TimeoutError(f"tool {name!r}: no result or progress in {timeout:g}s")
            waiting = {call} if watch is None else {call, watch}
            await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if call.done():
                return call.result()
            if watch is not None and watch.done():
                raise ConnectionError("the connection to the MCP server was lost")
    finally:
        if watch is not None:
            watch.cancel()
        if not call.done():
            call.cancel()
            with contextlib.suppress(BaseException):
                await call


async def list_tools(client: Any) -> list[mcp_types.Tool]:
    """Every tool of the server, following pagination."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await client.list_tools(params=params)
        tools += page.tools
        cursor = next_cursor(page)
        if not cursor:
            return tools


class _Watched(httpx.AsyncBaseTransport):
    """An httpx transport that sets `lost` when a POST (a request to the server) cannot be sent."""

    def __init__(self, lost: asyncio.Event) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lost = lost

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self.inner.handle_async_request(request)
        except httpx.TransportError:
            if request.method == "POST":
                self.lost.set()
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def streamable_http(url: str) -> AsyncIterator[tuple[Any, Any, asyncio.Event | None]]:
    """The streamable-HTTP client transport as (read, write, lost) in both lines.

    `lost` is None under 2.x. Under 1.x the transport swallows a failed POST (it logs "Error in
    post_writer") and the request waits out its timeout, so an event set by the HTTP client's
    transport tells `call_tool` the server is gone.
    """
    if MCP2:
        async with _streamable_http.streamable_http_client(url) as streams:
            yield streams[0], streams[1], None
        return
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    lost = asyncio.Event()
    timeout = httpx.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    async with httpx.AsyncClient(transport=_Watched(lost), timeout=timeout) as http_client:
        # mypy reads the installed mcp 2.x, whose client takes an httpx2 AsyncClient
        async with _streamable_http.streamable_http_client(url, http_client=http_client) as streams:  # type: ignore[arg-type]
            yield streams[0], streams[1], lost


__all__ = [
    "CONNECTION_CLOSED",
    "MCP2",
    "REQUEST_TIMEOUT",
    "MCPError",
    "call_tool",
    "error_code",
    "error_message",
    "input_schema",
    "is_error",
    "list_tools",
    "mcp_types",
    "next_cursor",
    "read_only_hint",
    "streamable_http",
    "structured_content",
    "task_support",
]
