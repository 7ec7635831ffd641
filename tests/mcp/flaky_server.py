"""A test MCP server with tools that misbehave on purpose: raise, hang, or kill the process."""

from __future__ import annotations

import os
import sys

import anyio

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError

server = Server("flaky", log_level="WARNING")
_count = 0


@server.tool()
def whoami() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def spawn_child(detach: bool = False) -> int:
    """Start a long-lived child process (a `sleep`) and return its pid; with `detach`, in its own session."""
    import subprocess

    return subprocess.Popen(["sleep", "300"], start_new_session=detach).pid


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def increment() -> int:
    """Add one to a per-process counter and return it."""
    global _count
    _count += 1
    return _count


@server.tool()
def big(chars: int) -> str:
    """A result of `chars` characters."""
    return "x" * chars


@server.tool()
def fail(reason: str) -> str:
    """Always raises a tool error."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
async def hang(seconds: float) -> str:
    """Sleep for a while (async: FastMCP 1.x runs sync tools on its event loop, blocking every other call)."""
    await anyio.sleep(seconds)
    return "woke up"


@server.tool()
def complete_task(answer: str) -> str:
    """The server's own completion tool (an agent must call it rather than add its own)."""
    return f"recorded answer: {answer}"


@server.tool()
def die(code: int = 3) -> str:
    """Exit the process at once, mid-call."""
    print("flaky server: dying on request", file=sys.stderr, flush=True)
    os._exit(code)


if __name__ == "__main__":
    server.run("stdio")
