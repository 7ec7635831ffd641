"""`Gate`: one model's admission control, the only place inference is ever held.

In synchronous mode a training step holds it: new requests wait, those in flight finish, and it
opens once the new step is served. In asynchronous mode it is never held; it still counts which
step each request in flight samples from, so that a checkpoint is never unloaded under a request.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

__all__ = ["Gate"]


class Gate:
    """Admission control for one model's inference: `hold` makes new requests wait and drains the rest.

    Requests in flight are also counted by the step they sample from (`use`), so that `unused` can wait
    until no request needs an old adapter any more.
    """

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._steps: Counter[int] = Counter()
        self._changed = asyncio.Event()
        self._held_at: float | None = None  # for held_seconds (art serve's /metrics)
        self._held_total = 0.0

    async def enter(self) -> None:
        while not self._open.is_set():
            await self._open.wait()
        self._inflight += 1
        self._idle.clear()

    def use(self, step: int | None) -> None:
        """The request that entered samples from `step` (None: the bare base model)."""
        if step is not None:
            self._steps[step] += 1

    def leave(self, step: int | None = None) -> None:
        self._inflight -= 1
        if step is not None:
            self._steps[step] -= 1
            self._steps += Counter()  # drop zero counts
        self._changed.set()
        self._changed = asyncio.Event()
        if self._inflight == 0:
            self._idle.set()

    async def unused(self, steps: list[int]) -> None:
        """Return once no request in flight samples from any of `steps`."""
        while any(self._steps[s] for s in steps):
            await self._changed.wait()

    async def hold(self) -> None:
        self._held_at = self._held_at or time.monotonic()
        self._open.clear()
        await self._idle.wait()

    def resume(self) -> None:
        if self._held_at is not None:
            self._held_total += time.monotonic() - self._held_at
            self._held_at = None
        self._open.set()

    def held_seconds(self) -> float:
        """Seconds spent held, the current hold included."""
        return self._held_total + (time.monotonic() - self._held_at if self._held_at is not None else 0.0)

    @property
    def held(self) -> bool:
        return not self._open.is_set()
