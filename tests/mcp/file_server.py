"""A file-backed MCP server: rows in an SQLite file, ./rows.sqlite unless --db PATH says otherwise.

Like most real servers (mcp-server-sqlite, filesystem servers), its state outlives the process.
"""

from __future__ import annotations

import argparse
import os
import sqlite3

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

parser = argparse.ArgumentParser()
parser.add_argument("--db", default="rows.sqlite")
DB = os.path.abspath(parser.parse_args().db)
if not os.path.isdir(os.path.dirname(DB)):  # as real servers do: refuse a directory that is not there
    raise SystemExit(f"Cannot access directory {os.path.dirname(DB)}")
server = Server("rows", log_level="WARNING")


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(DB, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS rows (text TEXT)")
    return db


@server.tool()
def add_row(text: str) -> str:
    """Store a row."""
    with _db() as db:
        db.execute("INSERT INTO rows VALUES (?)", (text,))
    return "ok"


@server.tool()
def list_rows() -> list[str]:
    """Every stored row."""
    with _db() as db:
        return [r[0] for r in db.execute("SELECT text FROM rows")]


@server.tool()
def where() -> dict[str, str]:
    """The database file, the working directory and $ART_ROLLOUT_DIR."""
    return {"db": DB, "cwd": os.getcwd(), "env": os.environ.get("ART_ROLLOUT_DIR", "")}


if __name__ == "__main__":
    server.run("stdio")
