"""Shared command line for the bundled servers: stdio by default, ``--http PORT`` for streamable HTTP."""

from __future__ import annotations

import argparse

from mcp.server.mcpserver import MCPServer


def run(server: MCPServer, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=f"the {server.name} MCP server")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
