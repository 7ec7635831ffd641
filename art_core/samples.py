"""Recovering sampled token ids that a client library dropped.

An app that builds its own chat model (LangChain's `ChatOpenAI`, `init_chat_model("openai:...")`)
against ART's endpoint gets the reply but not ``token_ids`` (LangChain drops unknown response
fields). ART's server keeps each recent completion's sampled ids, and this module asks for them
back: by completion id, or (a streamed reply, whose id LangChain also drops) by a digest of the
sampled logprobs, which LangChain keeps.

Which calls are worth asking about: those that name a trainable model registered in this process,
at the base URL it was registered with (`TrainableModel.register` notes both).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

import httpx

__all__ = ["fetch_sample", "logprobs_digest", "note_trainable", "registered_trainable", "trainable_endpoint"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_trainable: dict[tuple[str, str], str] = {}  # (base_url, served name) -> api key


def note_trainable(base_url: str, name: str, api_key: str) -> None:
    """Remember that `name` at `base_url` is a trainable model (called by `TrainableModel.register`)."""
    with _lock:
        _trainable[(base_url.rstrip("/"), name)] = api_key


def trainable_endpoint(base_url: str | None, model: str | None) -> str | None:
    """The API key for `model` at `base_url` if it is a trainable model registered here, else None.

    `model` may pin a step (``name@7``).
    """
    if not base_url or not model:
        return None
    return _trainable.get((base_url.rstrip("/"), model.split("@", 1)[0]))


def registered_trainable() -> list[str]:
    """The trainable models registered in this process, as ``name at base_url``."""
    return sorted(f"{name!r} at {url}" for url, name in _trainable)


def logprobs_digest(logprobs: list[float]) -> str:
    """A fingerprint of a sample: its logprobs as JSON renders them (exact for JSON round trips)."""
    return hashlib.sha256(repr([float(x) for x in logprobs]).encode()).hexdigest()[:32]


def fetch_sample(
    base_url: str,
    api_key: str,
    *,
    completion_id: str | None = None,
    index: int = 0,
    digest: str | None = None,
    timeout: float = 10.0,
) -> dict[str, Any] | None:
    """The server's record of a sampled reply: ``{"token_ids", "logprobs", "step"}``, or None if it
    has none (too old, or not ART's server). Blocking: it runs in a callback, on loopback."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        r = httpx.post(f"{root}/art/v1/samples", json={"completion_id": completion_id, "index": index,
                                                       "digest": digest},
                       headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout)
    except httpx.HTTPError as exc:
        logger.warning("could not ask %s for a sample's token ids: %s", root, exc)
        return None
    if r.status_code != 200:
        logger.debug("sample lookup at %s: HTTP %d", root, r.status_code)
        return None
    sample: dict[str, Any] | None = r.json().get("sample")
    return sample
