"""An MCP server that misbehaves on purpose, for the reliability suite.

`python fault_server.py exit` exits before the handshake (a missing API key, say); otherwise it serves
tools that raise a plain exception, return a huge output, or echo.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("faults", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def boom(reason: str) -> str:
    """Raise an ordinary exception (a bug in the tool)."""
    raise KeyError(f"tool bug: {reason}")


@server.tool()
def huge(chars: int) -> str:
    """Return `chars` characters."""
    return "x" * chars


if __name__ == "__main__":
    if sys.argv[1:] == ["exit"]:
        print("fault server: FAULT_API_KEY is not set", file=sys.stderr, flush=True)
        sys.exit(3)
    server.run("stdio")
