"""MCP servers bundled for tests and examples, written with the `mcp` SDK.

- `notes`: a stateful notes store (SQLite in memory); each process starts empty.
- `calculator`: stateless arithmetic and unit conversion.

Run one with ``python -m art_mcp.servers.notes`` (stdio) or ``... --http PORT`` (streamable HTTP);
`bundled_server(name)` gives spawn parameters that start it fastest.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.client.stdio import StdioServerParameters

BUNDLED = ("notes", "calculator")


def bundled_server(name: str) -> StdioServerParameters:
    """Spawn parameters for a bundled server, run by this interpreter.

    Example:
        async with art_mcp.connect(bundled_server("notes")) as session: ...
    """
    if name not in BUNDLED:
        raise ValueError(f"no bundled MCP server named {name!r}; choose one of {', '.join(BUNDLED)}")
    # run by path, not with -m: importing the art_mcp package would add a second to every spawn
    return StdioServerParameters(command=sys.executable, args=[str(Path(__file__).with_name(f"{name}.py"))])


__all__ = ["BUNDLED", "bundled_server"]
