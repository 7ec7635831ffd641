"""The ART-E MCP server: search and read one inbox of an inbox database, and hand in an answer.

    python examples/art_e/server.py --db inboxes.sqlite --inbox inbox-1000          # stdio
    python examples/art_e/server.py --db inboxes.sqlite --inbox inbox-1000 --http 8765

The database is opened read-only, so one process can serve any number of rollouts at once; a
rollout cannot change what another one sees. `from` and `to` are Python keywords, so the filters
are named `from_addr` and `to_addr` (as in OpenPipe's ART-E).
"""

# Run as a script, this file imports only the mcp SDK and sqlite3, so it starts fast.
from __future__ import annotations

import argparse
import datetime as dt
import sqlite3
import sys
import threading
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

MAX_RESULTS = 20

server = MCPServer(
    "art-e-inbox",
    instructions="One person's email inbox: search it, read emails, and hand in the final answer with its sources.",
    log_level="WARNING",
)
_state: dict[str, Any] = {}  # the connection and inbox id, set by main()
_lock = threading.Lock()  # sync tools run in worker threads


def open_inbox(db_path: str, inbox_id: str) -> None:
    """Serve `inbox_id` from the database at `db_path` (read-only)."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)
    inboxes = [r[0] for r in db.execute("SELECT DISTINCT inbox_id FROM emails ORDER BY inbox_id")]
    if inbox_id not in inboxes:
        db.close()
        raise SystemExit(f"inbox {inbox_id!r} is not in {db_path}; it holds: {', '.join(inboxes) or 'none'}")
    _state.update(db=db, inbox=inbox_id)


def _sql(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with _lock:
        return _state["db"].execute(query, params).fetchall()


def _date(value: str | None, name: str) -> str | None:
    if value is None or not value.strip():
        return None
    try:
        return dt.date.fromisoformat(value.strip()[:10]).isoformat()
    except ValueError:
        raise ToolError(f"{name}={value!r} is not a date; write it as YYYY-MM-DD, e.g. 2025-03-14") from None


def _match_query(keywords: list[str] | str) -> str:
    words = keywords.split() if isinstance(keywords, str) else [w for k in keywords for w in str(k).split()]
    words = [w for w in words if any(c.isalnum() for c in w)]
    if not words:
        raise ToolError("keywords is empty; pass one or more words to search for, e.g. ['budget', 'Cobalt']")
    return " AND ".join('"' + w.replace('"', '""') + '"' for w in words)


@server.tool()
def search_emails(
    keywords: list[str] | str,
    from_addr: str | None = None,
    to_addr: str | None = None,
    after: str | None = None,
    before: str | None = None,
    max_results: int = 10,
) -> str:
    """Find emails containing all the keywords (in subject, body, sender or attachment names).

    Filters: from_addr / to_addr (part of a name or address), after (on or after YYYY-MM-DD),
    before (before YYYY-MM-DD). Lists up to max_results matches, best first: [id] date, sender,
    subject, snippet.
    """
    if not 1 <= max_results <= MAX_RESULTS:
        raise ToolError(f"max_results must be between 1 and {MAX_RESULTS}, got {max_results}")
    query = [
        "SELECT e.id, e.date, e.from_name, e.from_addr, e.subject, snippet(emails_fts, 1, '', '', ' ... ', 16)",
        "FROM emails_fts JOIN emails e ON e.rowid = emails_fts.rowid",
        "WHERE emails_fts MATCH ? AND e.inbox_id = ?",
    ]
    params: list[Any] = [_match_query(keywords), _state["inbox"]]
    if from_addr:
        query.append("AND (lower(e.from_addr) LIKE ? OR lower(e.from_name) LIKE ?)")
        params += [f"%{from_addr.strip().lower()}%"] * 2
    if to_addr:
        query.append("AND (lower(e.to_addrs) LIKE ? OR lower(e.cc_addrs) LIKE ?)")
        params += [f"%{to_addr.strip().lower()}%"] * 2
    if (since := _date(after, "after")) is not None:
        query.append("AND e.date >= ?")
        params.append(since)
    if (until := _date(before, "before")) is not None:
        query.append("AND e.date < ?")
        params.append(until)
    query.append("ORDER BY bm25(emails_fts), e.date LIMIT ?")
    params.append(max_results)
    rows = _sql(" ".join(query), tuple(params))
    if not rows:
        return "No emails match. Try fewer or different keywords, or drop a filter."
    lines = [f"{len(rows)} email{'s' if len(rows) > 1 else ''} found (read one with read_email):"]
    for r in rows:
        snippet = " ".join(r[5].split())
        lines.append(f'[{r[0]}] {r[1][:10]} from {r[2]}: "{r[4]}" - {snippet}')
    return "\n".join(lines)


@server.tool()
def read_email(message_id: str) -> str:
    """Read one email in full: date, sender, recipients, subject, body and attachment names."""
    rows = _sql(
        "SELECT id, date, from_name, from_addr, to_addrs, cc_addrs, subject, body, attachments "
        "FROM emails WHERE id = ? AND inbox_id = ?",
        (message_id.strip(), _state["inbox"]),
    )
    if not rows:
        raise ToolError(f"no email with id {message_id!r} in this inbox; use search_emails to find ids")
    r = rows[0]
    head = [f"id: {r[0]}", f"date: {r[1]}", f"from: {r[2]} <{r[3]}>", f"to: {r[4]}"]
    if r[5]:
        head.append(f"cc: {r[5]}")
    head.append(f"subject: {r[6]}")
    if r[8]:
        head.append(f"attachments: {r[8]}")
    return "\n".join(head) + "\n\n" + r[7]


@server.tool()
def return_final_answer(answer: str, sources: list[str]) -> str:
    """Hand in the final answer (a short phrase, or "I don't know") and the ids of the emails it comes from."""
    ids = [s.strip() for s in sources]
    if ids:
        marks = ",".join("?" * len(ids))
        known = {r[0] for r in _sql(f"SELECT id FROM emails WHERE inbox_id = ? AND id IN ({marks})",
                                    (_state["inbox"], *ids))}  # fmt: skip
        if unknown := [i for i in ids if i not in known]:
            raise ToolError(
                f"unknown email ids in sources: {', '.join(unknown)}; cite ids that search_emails returned"
            )
    return "Answer recorded."


def main(argv: list[str] | None = None) -> None:
    """Serve one inbox over stdio, or streamable HTTP on 127.0.0.1 with ``--http PORT``."""
    parser = argparse.ArgumentParser(description=server.instructions)
    parser.add_argument(
        "--db", required=True, help="an inbox database written by examples.art_e.inbox.write_db"
    )
    parser.add_argument("--inbox", required=True, help="the inbox id to serve, e.g. inbox-1000")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    try:
        open_inbox(args.db, args.inbox)
    except sqlite3.Error as exc:
        sys.exit(
            f"cannot open the inbox database {args.db}: {exc}; write it with examples.art_e.inbox.write_db"
        )
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
