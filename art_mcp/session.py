"""A wrapped MCP client session: OpenAI tool specs out, recorded tool calls in.

`connect(server)` spawns a stdio server (a command line, an argument list or
`StdioServerParameters`) or reaches a streamable-HTTP one (an ``http(s)://`` URL). The MCP SDK's
transports run in anyio task groups that must be entered and left by one task, so each connection
lives in its own background task; the session it hands out can be used from any task.

A tool that fails, times out or is unknown becomes an error tool message the model can react to.
A server that dies raises `ServerCrashed`, which fails that rollout only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from art_core import current_trajectory, record_tool_result

from . import compat
from .compat import CONNECTION_CLOSED, REQUEST_TIMEOUT, MCPError, mcp_types
from .content import result_content
from .processes import mark, marked, stop_marked
from .tool_specs import ToolNames, openai_parameters

logger = logging.getLogger(__name__)

ServerSpec = str | Sequence[str] | StdioServerParameters
ROLLOUT_DIR = "{rollout_dir}"  # replaced in a pooled server's arguments, env and cwd by its own directory
DEFAULT_MAX_OUTPUT_CHARS = 100_000


class McpServerError(RuntimeError):
    """Something went wrong with the MCP server itself (not with one tool call)."""


class ServerStartError(McpServerError):
    """The server could not be spawned, reached or initialised."""


class ServerCrashed(McpServerError):
    """The server stopped (exited, closed its pipes, or dropped the connection) during a rollout."""


def resolve_server(server: ServerSpec) -> StdioServerParameters | str:
    """Normalise a server spec to `StdioServerParameters`, or a URL string for streamable HTTP."""
    if isinstance(server, StdioServerParameters):
        return server
    if isinstance(server, str):
        text = server.strip()
        if not text:
            raise ValueError("the MCP server is an empty string; pass a command line or an http(s):// URL")
        if text.startswith(("http://", "https://")):
            return text
        argv = shlex.split(text)
    elif isinstance(server, Sequence) and all(isinstance(a, str) for a in server):
        argv = list(server)
        if not argv:
            raise ValueError(
                "the MCP server is an empty argument list; pass e.g. ['python', '-m', 'my_server']"
            )
    else:
        raise TypeError(
            f"cannot use a {type(server).__name__} as an MCP server; pass a command line string, an argument "
            "list, mcp.StdioServerParameters, or an http(s):// URL"
        )
    return StdioServerParameters(command=argv[0], args=argv[1:])


def describe(target: StdioServerParameters | str) -> str:
    if isinstance(target, str):
        return target
    return shlex.join([target.command, *target.args])


def to_openai_tool(tool: mcp_types.Tool | dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """An MCP tool (or an OpenAI tool spec, passed through) as an OpenAI function tool spec.

    The schema is converted to what OpenAI accepts (`tool_specs.openai_parameters`); `name` is the
    name to offer it under (a session maps names OpenAI refuses, see `McpSession.openai_name`).
    """
    if isinstance(tool, dict):
        if tool.get("type") == "function" and "function" in tool:
            return tool
        raise ValueError(f"not an OpenAI tool spec (needs type='function' and 'function'): {tool!r}")
    schema = openai_parameters(compat.input_schema(tool))
    function: dict[str, Any] = {"name": name or ToolNames([tool.name]).to_openai[tool.name], "parameters": schema}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call, as recorded in the trajectory."""

    name: str
    arguments: dict[str, Any]
    text: str
    tool_call_id: str
    is_error: bool = False
    structured: dict[str, Any] | None = None
    latency_s: float = 0.0
    images: tuple[dict[str, Any], ...] = ()  # OpenAI image_url parts (data URLs), see content.py

    def message(self) -> dict[str, Any]:
        """The OpenAI tool message for this result (text only: tool messages take no images)."""
        return {"role": "tool", "tool_call_id": self.tool_call_id, "name": self.name, "content": self.text}

    def image_message(self) -> dict[str, Any] | None:
        """The result's images as a user message, for a model that takes images; None without any."""
        if not self.images:
            return None
        note = {"type": "text", "text": f"The images tool {self.name!r} returned ({self.tool_call_id}):"}
        return {"role": "user", "content": [note, *self.images]}


def _result_content(result: mcp_types.CallToolResult) -> tuple[str, list[dict[str, Any]]]:
    text, images = result_content(list(result.content))
    structured = compat.structured_content(result)
    if not text and structured is not None:
        text = json.dumps(structured, default=str)
    return text, images


def cut_text(text: str, limit: int | None) -> tuple[str, int]:
    """`text` cut to `limit` characters with a marker saying so, and how many were cut."""
    if limit is None or len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    note = (
        f"[tool output cut: {len(text)} characters, the first {limit} kept; pass max_output_chars= to "
        "art_mcp.connect or ServerPool (or set session.max_output_chars) to keep more]"
    )
    return f"{text[:limit]}\n{note}", cut


@dataclass
class McpSession:
    """A connected MCP server: its tools as OpenAI specs, and `call` that records each call.

    Example:
        async with art_mcp.connect("python -m my_server") as session:
            tools = session.openai_tools()
            result = await session.call("search", {"query": "x"}, tool_call_id=call.id)
    """

    client: ClientSession
    tools: list[mcp_types.Tool]
    label: str
    timeout: float | None = 30.0
    stderr: IO[str] | None = None
    max_output_chars: int | None = DEFAULT_MAX_OUTPUT_CHARS
    workdir: str | None = None  # the server's own working directory (pooled stdio servers)
    skipped_tools: dict[str, str] = field(default_factory=dict)  # tools not offered, and why
    _crashed: ServerCrashed | None = field(default=None, repr=False)
    _lost: asyncio.Event | None = field(default=None, repr=False)  # see compat.streamable_http

    def __post_init__(self) -> None:
        offered = []
        for tool in self.tools:
            if compat.task_support(tool) == "required":  # callable only as an MCP task, which ART does not run
                self.skipped_tools[tool.name] = "its execution.taskSupport is 'required' (MCP tasks)"
                logger.info("MCP server %s: tool %r is not offered: it runs only as a task", self.label, tool.name)
            else:
                offered.append(tool)
        self.tools = offered
        self._names = ToolNames([t.name for t in self.tools])

    def openai_name(self, name: str) -> str:
        """The name tool `name` is offered under: itself, or a valid one if OpenAI would refuse it
        (``^[a-zA-Z0-9_-]{1,64}$``; `call` takes either)."""
        return self._names.to_openai.get(name, name)

    def openai_tools(self, include: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The server's tools as OpenAI function specs (optionally only those named in `include`)."""
        names = {t.name for t in self.tools}
        wanted = None if include is None else {self._names.mcp(n) for n in include}
        if wanted is not None and (unknown := wanted - names):
            raise ValueError(f"unknown tools {sorted(unknown)} for {self.label}; it has {sorted(names)}")
        return [to_openai_tool(t, self.openai_name(t.name)) for t in self.tools if wanted is None or t.name in wanted]

    @property
    def crashed(self) -> ServerCrashed | None:
        """The crash seen on this session, if the server has died."""
        return self._crashed

    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def stderr_tail(self, lines: int = 20) -> str:
        """The last lines the server wrote to stderr (stdio servers only)."""
        return _tail(self.stderr, lines)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        tool_call_id: str | None = None,
        timeout: float | None = None,
    ) -> ToolResult:
        """Call a tool and record the result in the current trajectory as a tool message.

        `arguments` is a dict or the JSON string a model produced. Errors the model can react to
        (unknown tool, bad arguments, a tool that raises or times out) come back as a result with
        ``is_error=True``; a server that has died raises `ServerCrashed`. A result longer than
        `max_output_chars` is cut, with a marker, before it is recorded or returned (counted in the
        trajectory's ``mcp/truncated_results`` metric).
        """
        call_id = tool_call_id or f"call_{uuid.uuid4().hex[:12]}"
        name = self._names.mcp(name)
        if self._crashed is not None:
            raise ServerCrashed(f"{self._crashed} (tool {name!r} was called after that)") from self._crashed
        t0 = time.perf_counter()
        args, problem = _parse_arguments(arguments)
        structured = None
        images: list[dict[str, Any]] = []
        cut = 0
        if problem is None and name not in self.tool_names():
            problem = f"unknown tool {name!r}; available tools: {', '.join(self.tool_names())}"
        if problem is not None:
            text, is_error = f"Error: {problem}", True
        else:
            limit = timeout if timeout is not None else self.timeout
            try:
                result = await compat.call_tool(self.client, name, args, limit, self._lost)
            except TimeoutError:
                text, is_error = f"Error: tool {name!r} timed out after {limit:g}s", True
            except MCPError as exc:
                code = compat.error_code(exc)
                if code == REQUEST_TIMEOUT:
                    text = f"Error: tool {name!r} timed out after {limit:g}s"
                elif code == CONNECTION_CLOSED:
                    raise self._crash(name, exc) from exc
                else:
                    text = f"Error: tool {name!r} failed: {compat.error_message(exc)}"
                is_error = True
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
                raise self._crash(name, exc) from exc
            else:
                (text, images), is_error, structured = (
                    _result_content(result),
                    compat.is_error(result),
                    compat.structured_content(result),
                )
                if is_error and not text.lower().startswith("error"):
                    text = f"Error: {text}"
                text, cut = cut_text(text, self.max_output_chars)
                if cut:
                    structured = None  # as long as the text: not kept in the trajectory either
        out = ToolResult(
            name=name,
            arguments=args,
            text=text,
            tool_call_id=call_id,
            is_error=is_error,
            structured=structured,
            latency_s=time.perf_counter() - t0,
            images=tuple(images),
        )
        _record(out, cut)
        return out

    def _crash(self, tool: str, exc: BaseException) -> ServerCrashed:
        tail = self.stderr_tail()
        detail = f"; its last stderr lines:\n{tail}" if tail else ""
        self._crashed = ServerCrashed(
            f"MCP server {self.label} stopped during a call to tool {tool!r} ({exc!r}){detail}"
        )
        return self._crashed


def _parent(pid: int) -> int | None:
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


def _tail(file: IO[str] | None, lines: int = 20) -> str:
    if file is None:
        return ""
    with contextlib.suppress(OSError, ValueError):
        file.flush()
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - 16384))  # a chatty server's log can be long: read its end only
        return "\n".join(file.read().splitlines()[-lines:])
    return ""


def _parse_arguments(arguments: dict[str, Any] | str | None) -> tuple[dict[str, Any], str | None]:
    if arguments is None or arguments == "":
        return {}, None
    if isinstance(arguments, dict):
        return arguments, None
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        return {}, f"the arguments are not valid JSON ({exc}); send a JSON object"
    if not isinstance(parsed, dict):
        return {}, f"the arguments must be a JSON object, got {type(parsed).__name__}"
    return parsed, None


def _record(result: ToolResult, cut: int = 0) -> None:
    trajectory = current_trajectory()
    if trajectory is None:
        return
    record_tool_result(result.tool_call_id, result.text, name=result.name)
    entry: dict[str, Any] = {
        "tool_call_id": result.tool_call_id,
        "name": result.name,
        "arguments": result.arguments,
        "is_error": result.is_error,
        "latency_s": round(result.latency_s, 6),
    }
    if result.structured is not None:
        entry["structured"] = result.structured
    if result.images:
        entry["images"] = list(result.images)
    if cut:
        entry["cut_chars"] = cut
    trajectory.metadata.setdefault("mcp_calls", []).append(entry)
    m = trajectory.metrics
    m["mcp/calls"] = int(m.get("mcp/calls", 0)) + 1
    if cut:
        m["mcp/truncated_results"] = int(m.get("mcp/truncated_results", 0)) + 1
        m["mcp/truncated_chars"] = int(m.get("mcp/truncated_chars", 0)) + cut
    m["mcp/errors"] = int(m.get("mcp/errors", 0)) + int(result.is_error)
    m["mcp/latency_s"] = float(m.get("mcp/latency_s", 0.0)) + result.latency_s


def with_rollout_dir(target: StdioServerParameters, workdir: str) -> StdioServerParameters:
    """`target` run in `workdir`: ``{rollout_dir}`` replaced in its arguments, env and cwd by the
    directory, ``ART_ROLLOUT_DIR`` set in its env, and the directory as its working directory
    unless it names its own."""

    def fill(text: str) -> str:
        return text.replace(ROLLOUT_DIR, workdir)

    env = {k: fill(v) for k, v in (target.env or {}).items()}
    env.setdefault("ART_ROLLOUT_DIR", workdir)
    cwd = fill(str(target.cwd)) if target.cwd is not None else workdir
    return target.model_copy(
        update={"command": fill(target.command), "args": [fill(a) for a in target.args], "env": env, "cwd": cwd}
    )


class _Stopped(Exception):
    """The connection was closed before the server had finished starting."""


class Connection:
    """One live server connection, owned by a background task (see the module docstring).

    With `workdir`, a stdio server runs there (see `with_rollout_dir`); the directory is the
    caller's to remove.
    """

    def __init__(
        self,
        server: ServerSpec,
        *,
        timeout: float | None = 30.0,
        startup_timeout: float = 60.0,
        max_output_chars: int | None = DEFAULT_MAX_OUTPUT_CHARS,
        workdir: str | None = None,
    ) -> None:
        target = resolve_server(server)
        if workdir is not None and not isinstance(target, str):
            target = with_rollout_dir(target, workdir)
        self._token: str | None = None  # the marker in a stdio server's env (processes.py)
        if not isinstance(target, str):
            target, self._token = mark(target)
        self.target = target
        self.label = describe(target)
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.max_output_chars = max_output_chars
        self.workdir = workdir
        self._ready: asyncio.Future[McpSession] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> McpSession:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        # an opener cancelled while the server starts never reads the outcome: mark it read
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._task = loop.create_task(self._own(), name=f"mcp:{self.label}")
        try:
            return await asyncio.shield(self._ready)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop the server and wait until its task has ended (the wait survives a cancelled caller).

        The connection task is never cancelled: cancelling a subprocess spawn can hang asyncio for
        good (CPython 3.11-3.13 `_make_subprocess_transport` waits on a child that never reports).
        """
        self._stop.set()
        if self._task is None or self._task.done():
            return
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            await asyncio.shield(self._task)  # finish the stop, then let the cancellation through
            raise

    async def _own(self) -> None:
        assert self._ready is not None
        stderr = None
        group: int | None = None
        if not isinstance(self.target, str):
            # append mode: the child writes at the end whatever offset our reads leave behind
            stderr = tempfile.TemporaryFile("a+", encoding="utf-8", errors="replace")
        try:
            async with contextlib.AsyncExitStack() as stack:
                lost = None
                if isinstance(self.target, str):
                    read, write, lost = await stack.enter_async_context(compat.streamable_http(self.target))
                else:
                    assert stderr is not None  # made above for a process
                    read, write = await stack.enter_async_context(stdio_client(self.target, errlog=stderr))
                client = await stack.enter_async_context(ClientSession(read, write))
                # the scope sits inside the transport's task groups: anyio scopes must nest
                with anyio.fail_after(self.startup_timeout):
                    await client.initialize()
                    tools = await compat.list_tools(client)
                if self._token is not None:  # the server is our child, and leads its own process group
                    group = next((p for p in await asyncio.to_thread(marked, self._token)
                                  if _parent(p) == os.getpid()), None)
                session = McpSession(
                    client,
                    tools,
                    self.label,
                    timeout=self.timeout,
                    stderr=stderr,
                    max_output_chars=self.max_output_chars,
                    workdir=self.workdir,
                    _lost=lost,
                )
                if self._stop.is_set():  # closed while starting: nobody will use it
                    raise _Stopped
                self._ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to the opener, or logged after a crash
            if not self._ready.done():
                self._ready.set_exception(self._start_error(exc, _tail(stderr)))
            elif not isinstance(exc, asyncio.CancelledError):
                logger.debug("MCP server %s closed with %r", self.label, exc)
        finally:
            if self._token is not None:  # the SDK has stopped the server; now whatever it started
                stopped = await stop_marked(self._token, group)
                if stopped:
                    logger.debug("MCP server %s: stopped %d leftover process(es)", self.label, stopped)
            if stderr is not None:
                stderr.close()

    def _start_error(self, exc: BaseException, stderr_tail: str) -> ServerStartError:
        leaf = exc
        while len(getattr(leaf, "exceptions", ())) == 1:  # unwrap anyio's exception groups
            leaf = leaf.exceptions[0]  # type: ignore[attr-defined]
        if isinstance(leaf, TimeoutError):
            why = f"it did not finish starting within {self.startup_timeout:g}s"
        elif isinstance(leaf, FileNotFoundError):
            why = f"the command was not found ({leaf}); check the command and PATH"
        elif isinstance(leaf, MCPError) and compat.error_code(leaf) == CONNECTION_CLOSED:
            why = "it exited (or closed its stdout) before the MCP handshake finished; is it an MCP server?"
        elif isinstance(leaf, (_Stopped, asyncio.CancelledError)):
            why = "it was stopped while starting"
        else:
            why = repr(leaf)
        detail = f"; its last stderr lines:\n{stderr_tail}" if stderr_tail else ""
        error = ServerStartError(f"could not start MCP server {self.label}: {why}{detail}")
        error.__cause__ = exc
        return error


@contextlib.asynccontextmanager
async def connect(
    server: ServerSpec,
    *,
    timeout: float | None = 30.0,
    startup_timeout: float = 60.0,
    max_output_chars: int | None = DEFAULT_MAX_OUTPUT_CHARS,
    workdir: str | None = None,
) -> AsyncIterator[McpSession]:
    """Connect to an MCP server for the length of the block; the server process stops after it.

    `server` is a command line (``"python -m my_server"``), an argument list, an
    `mcp.StdioServerParameters`, or an ``http(s)://`` URL of a streamable-HTTP server. `timeout`
    bounds each tool call (a call that runs past it becomes an error tool message);
    `startup_timeout` bounds spawning and the MCP handshake; `max_output_chars` cuts longer tool
    results (None: never); `workdir` runs a stdio server there, ``{rollout_dir}`` in its command
    line, env and cwd replaced by it (see `with_rollout_dir`; the directory is the caller's). A server
    that names ``{rollout_dir}`` and gets no `workdir` runs in a fresh temporary directory, removed after.

    Example:
        async with art_mcp.connect(["python", "-m", "art_mcp.servers.notes"]) as session:
            print(session.openai_tools())
    """
    with contextlib.ExitStack() as stack:
        if workdir is None and _uses_rollout_dir(server):
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="art-mcp-"))
        connection = Connection(
            server, timeout=timeout, startup_timeout=startup_timeout, max_output_chars=max_output_chars, workdir=workdir
        )
        session = await connection.open()
        try:
            yield session
        finally:
            await connection.close()


def _uses_rollout_dir(spec: ServerSpec) -> bool:
    """Whether a stdio server's command line, env or cwd names ``{rollout_dir}``."""
    target = resolve_server(spec)
    if isinstance(target, str):
        return False
    texts = [target.command, *target.args, *(target.env or {}).values(), str(target.cwd or "")]
    return any(ROLLOUT_DIR in t for t in texts)


__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "ROLLOUT_DIR",
    "Connection",
    "McpServerError",
    "McpSession",
    "ServerCrashed",
    "ServerSpec",
    "ServerStartError",
    "ToolResult",
    "connect",
    "cut_text",
    "resolve_server",
    "to_openai_tool",
    "with_rollout_dir",
]
