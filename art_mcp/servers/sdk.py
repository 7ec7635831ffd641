"""The MCP server SDK as the bundled servers use it, under mcp 1.x or 2.x.

Servers run as scripts import only this file and `mcp` (not `art_mcp`), so a spawn stays fast.
"""

from __future__ import annotations

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError

    MCP2 = True
except ImportError:  # mcp 1.x: the same server, called FastMCP
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef, attr-defined]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef, import-not-found]

    MCP2 = False


def serve(server: Server, http_port: int | None = None) -> None:
    """Serve over stdio, or streamable HTTP on 127.0.0.1:`http_port`."""
    if http_port is None:
        server.run("stdio")
    elif MCP2:
        server.run("streamable-http", host="127.0.0.1", port=http_port)
    else:  # 1.x reads host and port from its settings (not in 2.x's, which mypy reads)
        server.settings.host, server.settings.port = "127.0.0.1", http_port  # type: ignore[attr-defined]
        server.run("streamable-http")


__all__ = ["MCP2", "Server", "ToolError", "serve"]
