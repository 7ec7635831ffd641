"""`retry`: call again with exponential backoff when a chosen exception is raised."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def retry(
    max_attempts: int = 3,
    *,
    delay: float = 0.5,
    backoff: float = 2.0,
    max_delay: float = 30.0,
    jitter: float = 0.1,
    exceptions: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    on_retry: Callable[[BaseException, int], Any] | None = None,
) -> Callable[[F], F]:
    """Retry a sync or async function on `exceptions`, waiting `delay * backoff**k` between tries.

    Example:
        @retry(max_attempts=4, exceptions=(TimeoutError, ConnectionError))
        async def call_tool(...): ...
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")

    def wait_for(attempt: int) -> float:
        base = min(max_delay, delay * backoff ** (attempt - 1))
        return base * (1 + random.uniform(-jitter, jitter)) if jitter else base

    def note(fn: Callable[..., Any], exc: BaseException, attempt: int) -> None:
        logger.warning("%s failed (attempt %d/%d): %r; retrying", fn.__qualname__, attempt, max_attempts, exc)
        if on_retry is not None:
            on_retry(exc, attempt)

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                for attempt in range(1, max_attempts + 1):
                    try:
                        return await fn(*args, **kwargs)
                    except exceptions as exc:
                        if attempt == max_attempts:
                            raise
                        note(fn, exc, attempt)
                        await asyncio.sleep(wait_for(attempt))

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            for attempt in range(1, max_attempts + 1):
                try:
                    return fn(*args, **kwargs)
                except exceptions as exc:
                    if attempt == max_attempts:
                        raise
                    note(fn, exc, attempt)
                    time.sleep(wait_for(attempt))

        return sync_wrapper  # type: ignore[return-value]

    return decorate
