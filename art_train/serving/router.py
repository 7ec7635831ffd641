"""Which replica serves a request: least outstanding requests, sticky per trajectory.

The rule: among the replicas that are up and hold the request's adapter, the one with the fewest
requests in flight (ties: the one that served fewest). A request with a session key (the trajectory
id from the ``X-ART-Trajectory`` header, else a hash of the conversation's first messages) goes to the
replica that served the session's last turn, which holds its prefix in cache, unless that replica is
not a candidate (down, or not verified at the request's step) or has more than `slack` requests in
flight beyond the least loaded one. The session then moves to the replica chosen.

The router only picks; the `ReplicaSet` counts, retries and restarts.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["Router", "session_key"]


class Load(Protocol):
    """What the router reads of a replica."""

    index: int
    inflight: int
    served: int


def session_key(session: str | None, messages: list[dict[str, Any]]) -> str:
    """`session` when given, else a hash of the messages up to and including the first user message
    (what every turn of one rollout starts with)."""
    if session:
        return "id:" + session
    head: list[dict[str, Any]] = []
    for message in messages:
        head.append(message)
        if message.get("role") == "user":
            break
    return "hash:" + hashlib.sha1(json.dumps(head, sort_keys=True, default=str).encode()).hexdigest()


class Router:
    """Picks a replica for each request (see the module docstring for the rule).

    Args:
        sticky: route a session's turns to one replica (engines with a prefix cache: both bundled ones).
        slack: how many more requests in flight than the least loaded the session's replica may have.
        max_sessions: sessions remembered (least recently used forgotten first).
    """

    def __init__(self, *, sticky: bool = True, slack: int = 4, max_sessions: int = 65536) -> None:
        self.sticky, self.slack, self.max_sessions = sticky, slack, max_sessions
        self.sessions: OrderedDict[str, int] = OrderedDict()

    def pick(self, candidates: Sequence[Load], key: str | None = None) -> Load:
        if not candidates:
            raise ValueError("no replica to pick from")
        least = min(candidates, key=lambda r: (r.inflight, r.served))
        if not self.sticky or key is None:
            return least
        home = self.sessions.get(key)
        chosen = next((r for r in candidates if r.index == home), None)
        if chosen is None or chosen.inflight > least.inflight + self.slack:
            chosen = least
        self.sessions[key] = chosen.index
        self.sessions.move_to_end(key)
        if len(self.sessions) > self.max_sessions:
            self.sessions.popitem(last=False)
        return chosen
