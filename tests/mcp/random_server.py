"""A non-deterministic MCP server: `roll` returns a random number, `add_item` stores under a random id.

Two fresh copies answer the same calls differently, so verified tasks must refuse it.
"""

from __future__ import annotations

import random
import sys
import uuid

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

server = Server("random", log_level="WARNING")
ITEMS: dict[str, str] = {}
ONLY = sys.argv[1] if len(sys.argv) > 1 else ""  # "state": only the stateful tools


def add_item(text: str) -> str:
    """Store an item; returns "stored"."""
    ITEMS[uuid.uuid4().hex[:8]] = text
    return "stored"


def list_items() -> dict[str, str]:
    """Every stored item by its id."""
    return dict(ITEMS)


def roll(sides: int = 6) -> int:
    """Roll a die with this many sides."""
    return random.randint(1, max(1, sides))


for fn in (add_item, list_items) if ONLY == "state" else (add_item, list_items, roll):
    server.tool()(fn)

if __name__ == "__main__":
    server.run("stdio")
