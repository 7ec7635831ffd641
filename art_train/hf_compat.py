"""The one place that bridges transformers versions (checked at call time, nothing patched).

transformers renamed the forward argument `past_key_values` to `cache` in the 5.2x releases (the old
name still works with a deprecation warning there, until 5.40); 5.17, which the GPU machines ship,
knows only `past_key_values` and silently ignores `cache`: a decode step then runs without its keys
and values, and a shared prefix is not attended to. Every forward that passes a KV cache goes
through `cache_kwargs`.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any

__all__ = ["cache_kwargs"]


@lru_cache(maxsize=64)
def _cache_name(forward_type: type[Any]) -> str:
    params = inspect.signature(forward_type.forward).parameters
    if "cache" in params:
        return "cache"
    if "past_key_values" in params:
        return "past_key_values"
    return "cache"


def cache_kwargs(module: Any, cache: Any) -> dict[str, Any]:
    """`{name: cache}` with the name `module`'s forward takes for its KV cache.

    Example:
        out = model(input_ids=ids, **cache_kwargs(model, DynamicCache()), use_cache=True)
    """
    return {_cache_name(type(module)): cache}  # type: ignore[arg-type]  # mypy: a class is not Hashable


def output_cache(out: Any) -> Any:
    """The cache a forward returned (`cache` in 5.2x, `past_key_values` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
