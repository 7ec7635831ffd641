"""The sampled token ids of recent completions, for clients whose library dropped them.

LangChain's `ChatOpenAI` keeps a reply's completion id (unstreamed) and its logprobs, but not the
``token_ids`` ART sends. The server remembers each completion's ids and logprobs here, by completion
id and by a digest of the logprobs, so `art_core.samples.fetch_sample` can recover them. Bounded by
tokens: the oldest completions go first.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from typing import Any

from art_core.samples import logprobs_digest

__all__ = ["SampleStore", "StreamRecorder"]

_Choice = tuple[array, array, "int | None"]  # token ids, logprobs, checkpoint step


class SampleStore:
    """Completion id -> each choice's sampled ids and logprobs; at most `max_tokens` tokens kept."""

    def __init__(self, max_tokens: int = 2_000_000) -> None:
        self.max_tokens = max_tokens
        self._by_id: OrderedDict[str, list[_Choice]] = OrderedDict()
        self._by_digest: dict[str, tuple[str, int]] = {}
        self._digests: dict[str, list[str]] = {}
        self._tokens = 0
        self._lock = threading.Lock()

    def add(self, completion_id: str, choices: list[tuple[list[int], list[float]]], step: int | None) -> None:
        if not completion_id or not choices:
            return
        kept = [(array("l", ids), array("d", lps), step) for ids, lps in choices]
        digests = [logprobs_digest(lps) for _, lps in choices if lps]
        with self._lock:
            self._by_id[completion_id] = kept
            self._digests[completion_id] = digests
            for i, d in enumerate(digests):
                self._by_digest[d] = (completion_id, i)
            self._tokens += sum(len(c[0]) for c in kept)
            while self._tokens > self.max_tokens and len(self._by_id) > 1:
                old, gone = self._by_id.popitem(last=False)
                self._tokens -= sum(len(c[0]) for c in gone)
                for d in self._digests.pop(old, ()):
                    self._by_digest.pop(d, None)

    def add_response(self, body: dict[str, Any]) -> None:
        """Keep an unstreamed ``chat.completion`` body's choices."""
        choices = sorted(body.get("choices") or [], key=lambda c: c.get("index", 0))
        self.add(body.get("id", ""), [_ids_and_logprobs(c) for c in choices], body.get("art_step"))

    def get(self, completion_id: str | None, index: int = 0, digest: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            if digest and not (completion_id and completion_id in self._by_id):
                completion_id, index = self._by_digest.get(digest, (None, 0))
            choices = self._by_id.get(completion_id or "")
            if choices is None or not 0 <= index < len(choices):
                return None
            ids, lps, step = choices[index]
            return {"token_ids": list(ids), "logprobs": list(lps) if len(lps) == len(ids) else None, "step": step}


class StreamRecorder:
    """Gathers one streamed completion's chunks into the store when the stream ends."""

    def __init__(self, store: SampleStore) -> None:
        self.store = store
        self.completion_id = ""
        self.step: int | None = None
        self.choices: dict[int, tuple[list[int], list[float]]] = {}

    def chunk(self, chunk: dict[str, Any]) -> None:
        self.completion_id = chunk.get("id") or self.completion_id
        self.step = chunk.get("art_step", self.step)
        for c in chunk.get("choices") or []:
            ids, lps = self.choices.setdefault(c.get("index", 0), ([], []))
            more_ids, more_lps = _ids_and_logprobs(c)
            ids.extend(more_ids)
            lps.extend(more_lps)

    def done(self) -> None:
        self.store.add(self.completion_id, [self.choices[i] for i in sorted(self.choices)], self.step)


def _ids_and_logprobs(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    content = (choice.get("logprobs") or {}).get("content") or []
    return list(choice.get("token_ids") or []), [float(e["logprob"]) for e in content]
