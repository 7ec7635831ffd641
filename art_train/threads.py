"""An asyncio default executor whose calls each run on a thread of their own, which ends with the call.

torch on CPU runs its parallel ops in an OpenMP pool of the thread that calls them, and the pool lives
as long as that thread. `asyncio.to_thread`'s workers live on, so a trainer step run there leaves a pool
behind; once libgomp manages more threads than there are CPUs it stops spinning between parallel
regions, and every small op of the engine's decode steps then waits for a worker to wake. With each
call on a fresh thread, a pool lasts as long as the call that made it. The same holds the other way: the
embedded engine's worker thread ends when it has been idle a second (`Scheduler`'s `idle_s`), so a trainer
step beside an idle engine runs with the only pool.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["FreshThreads", "use_fresh_threads"]


class FreshThreads(ThreadPoolExecutor):
    """`ThreadPoolExecutor` in name (asyncio asks for one); each `submit` starts a new thread."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self._live: set[threading.Thread] = set()
        self._guard = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:  # type: ignore[override]
        future: Future[Any] = Future()

        def run() -> None:
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        future.set_exception(exc)
            finally:
                with self._guard:
                    self._live.discard(threading.current_thread())

        thread = threading.Thread(target=run, name="art-call", daemon=True)
        with self._guard:
            self._live.add(thread)
        thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if wait:
            with self._guard:
                live = list(self._live)
            for thread in live:
                thread.join()
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


def use_fresh_threads(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Make `loop` (the running one by default) run `to_thread` / `run_in_executor(None, ...)` on fresh threads."""
    (loop or asyncio.get_running_loop()).set_default_executor(FreshThreads())
