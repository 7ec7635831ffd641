"""MCP servers bundled for tests and examples, written with the `mcp` SDK.

- `notes`: a stateful notes store (SQLite in memory); each process starts empty.
- `calculator`: stateless arithmetic and unit conversion.

Run one with ``python -m art_mcp.servers.notes`` (stdio) or ``... --http PORT`` (streamable HTTP).
"""

from __future__ import annotations

import sys

from mcp.client.stdio import StdioServerParameters

BUNDLED = ("notes", "calculator")


def bundled_server(name: str) -> StdioServerParameters:
    """Spawn parameters for a bundled server, run by this interpreter.

    Example:
        async with art_mcp.connect(bundled_server("notes")) as session: ...
    """
    if name not in BUNDLED:
        raise ValueError(f"no bundled MCP server named {name!r}; choose one of {', '.join(BUNDLED)}")
    return StdioServerParameters(command=sys.executable, args=["-m", f"art_mcp.servers.{name}"])


__all__ = ["BUNDLED", "bundled_server"]
