"""A disk cache of judge answers, keyed on the judge, the rubric and the exact prompt content."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from art_core import Model, RunDir, atomic_write_text

logger = logging.getLogger(__name__)

CacheLocation = str | os.PathLike[str] | Model | RunDir

FORMAT = 1  # bump when what a cached answer means changes


def cache_dir(location: CacheLocation) -> Path:
    """A user path as given; a model's or run directory's ``ruler_cache`` folder."""
    if isinstance(location, Model):
        return RunDir(location.project, location.name).path / "ruler_cache"
    if isinstance(location, RunDir):
        return location.path / "ruler_cache"
    if isinstance(location, (str, os.PathLike)):
        return Path(location)
    raise TypeError(
        f"cache is a {type(location).__name__}; pass a folder path, an art_core.Model or an art_core.RunDir"
    )


def cache_key(judge: str, messages: list[dict[str, Any]], structured: bool) -> str:
    """The rendered prompt holds the rubric and every trajectory, so it is the content key."""
    blob = json.dumps([FORMAT, judge, structured, messages], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class JudgeCache:
    def __init__(self, location: CacheLocation) -> None:
        self.path = cache_dir(location)

    def _file(self, key: str) -> Path:
        return self.path / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._file(key)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # a damaged entry costs one call, not a crash
            logger.warning("ignoring unreadable RULER cache entry %s", path)
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        atomic_write_text(self._file(key), json.dumps(value, sort_keys=True))


__all__ = ["CacheLocation", "JudgeCache", "cache_dir", "cache_key"]
