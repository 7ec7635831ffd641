"""A stateful MCP server: a small notes store in an in-memory SQLite database.

Each process starts with an empty store, so isolation between rollouts is visible: a note saved in
one process is never seen by another.
"""

# Run as a script, this file imports only the mcp SDK (not art_mcp), so it starts fast.
from __future__ import annotations

import argparse
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported, or run with -m (mypy reads this branch)
    from .sdk import Server, ToolError, serve
else:  # run by path (bundled_server): this folder is sys.path[0]
    from sdk import Server, ToolError, serve

server = Server(
    "notes",
    instructions="A notes store: save, find, read, update and delete short notes.",
    log_level="WARNING",
)
# sync tools run in worker threads: one connection, shared under a lock
_db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
_lock = threading.Lock()
_db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT, tags TEXT)")


def _sql(query: str, params: tuple[Any, ...] = ()) -> tuple[list[tuple[Any, ...]], int | None]:
    with _lock:
        cur = _db.execute(query, params)
        return cur.fetchall(), cur.lastrowid


def _note(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": row[0], "title": row[1], "body": row[2], "tags": [t for t in row[3].split(",") if t]}


@server.tool()
def add_note(title: str, body: str, tags: list[str] | None = None) -> dict[str, Any]:
    """Save a new note with a unique title and optional tags; returns the stored note with its id."""
    if not title.strip():
        raise ToolError("title is empty; give the note a short title")
    try:
        _, note_id = _sql(
            "INSERT INTO notes (title, body, tags) VALUES (?, ?, ?)",
            (title.strip(), body, ",".join(t.strip().lower() for t in tags or [])),
        )
    except sqlite3.IntegrityError:
        raise ToolError(
            f"a note titled {title!r} already exists; use update_note or pick another title"
        ) from None
    return get_note(note_id or 0)


@server.tool()
def get_note(note_id: int) -> dict[str, Any]:
    """Read one note (title, body, tags) by id."""
    rows, _ = _sql("SELECT id, title, body, tags FROM notes WHERE id = ?", (note_id,))
    if not rows:
        raise ToolError(f"no note with id {note_id}; use list_notes or search_notes to find ids")
    return _note(rows[0])


@server.tool()
def update_note(note_id: int, body: str) -> dict[str, Any]:
    """Replace the body of a note."""
    get_note(note_id)
    _sql("UPDATE notes SET body = ? WHERE id = ?", (body, note_id))
    return get_note(note_id)


@server.tool()
def delete_note(note_id: int) -> str:
    """Delete a note by id."""
    get_note(note_id)
    _sql("DELETE FROM notes WHERE id = ?", (note_id,))
    return f"deleted note {note_id}"


@server.tool()
def list_notes(tag: str | None = None) -> list[dict[str, Any]]:
    """List all notes (id, title, tags), optionally only those with a tag."""
    rows, _ = _sql("SELECT id, title, body, tags FROM notes ORDER BY id")
    notes = [_note(r) for r in rows]
    if tag:
        notes = [n for n in notes if tag.strip().lower() in n["tags"]]
    return [{"id": n["id"], "title": n["title"], "tags": n["tags"]} for n in notes]


@server.tool()
def search_notes(query: str) -> list[dict[str, Any]]:
    """Find notes whose title or body contains the query (case-insensitive)."""
    pattern = f"%{query.lower()}%"
    rows, _ = _sql(
        "SELECT id, title, body, tags FROM notes WHERE lower(title) LIKE ? OR lower(body) LIKE ? ORDER BY id",
        (pattern, pattern),
    )
    return [_note(r) for r in rows]


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio, or streamable HTTP on 127.0.0.1 with ``--http PORT``."""
    parser = argparse.ArgumentParser(description=server.instructions)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    serve(server, args.http)


if __name__ == "__main__":
    main()
