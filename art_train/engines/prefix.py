"""Prefix caching for the embedded engine: keys and values of finished sequences, reused by later prompts.

A multi-turn agent sends its whole conversation every turn, so without this each request prefills
everything again: on 2 CPU cores prefill was ~95% of a Tic Tac Toe evaluation (64 games of ~270
tokens took 26 s, almost none of it decoding). When a sequence finishes, its keys and values (the
prompt and the tokens it generated) are kept here; a new prompt that starts with the same tokens
prefills only the rest. Entries are per adapter and dropped when that adapter is reloaded; the
oldest go first once the byte budget is spent, and an entry that another one extends is dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

__all__ = ["Entry", "PrefixCache"]

MIN_REUSE = 16  # shorter common prefixes are prefilled again: the copy would cost more than it saves


@dataclass
class Entry:
    adapter: str | None
    tokens: torch.Tensor  # [n] the token ids whose keys and values are kept
    keys: list[torch.Tensor]  # per layer [heads, n, dim]
    values: list[torch.Tensor]
    nbytes: int


class PrefixCache:
    """Finished sequences' KV, looked up by the longest common token prefix.

    Example:
        cache = PrefixCache(max_bytes=1 << 30)
        gen = cache.generation(None)
        cache.store(None, gen, tokens, keys, values)
        entry, n = cache.lookup(None, prompt)  # reuse entry's first n positions
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self._generations: dict[str | None, int] = {}
        self._next = 0
        self._lock = threading.Lock()  # lookups and stores run on the worker, drops on the event loop

    def __len__(self) -> int:
        return len(self._entries)

    def generation(self, adapter: str | None) -> int:
        """A counter that `drop` moves on; a store made under an older one is ignored."""
        return self._generations.get(adapter, 0)

    def drop(self, adapter: str | None) -> None:
        """Forget every entry of `adapter` (its weights changed) and refuse stores started before now."""
        with self._lock:
            self._generations[adapter] = self._generations.get(adapter, 0) + 1
            for key in [k for k, e in self._entries.items() if e.adapter == adapter]:
                self.nbytes -= self._entries.pop(key).nbytes

    def lookup(self, adapter: str | None, prompt: list[int] | torch.Tensor) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with `prompt`, and that length (below len(prompt))."""
        ids = torch.as_tensor(prompt, dtype=torch.long)
        best, best_n, best_key = None, 0, None
        with self._lock:
            for key, entry in self._entries.items():
                if entry.adapter != adapter:
                    continue
                n = _common_prefix(entry.tokens, ids)
                if n > best_n:
                    best, best_n, best_key = entry, n, key
            best_n = min(best_n, len(ids) - 1)  # the last prompt token is always fed: its logits are needed
            if best_key is None or best_n < MIN_REUSE:  # None with best
                return None, 0
            self._entries.move_to_end(best_key)
        return best, best_n

    def store(self, adapter: str | None, generation: int, tokens: list[int], keys: list[torch.Tensor],
              values: list[torch.Tensor]) -> bool:
        """Keep one sequence's KV (per layer [heads, len(tokens), dim]); False when it is not kept."""
        ids = torch.as_tensor(tokens, dtype=torch.long)
        nbytes = sum(t.numel() * t.element_size() for t in (*keys, *values)) + ids.numel() * 8
        if len(ids) < MIN_REUSE or nbytes > self.max_bytes:
            return False
        with self._lock:
            if generation != self.generation(adapter):
                return False  # the adapter was reloaded while this sequence ran
            for key in [k for k, e in self._entries.items()
                        if e.adapter == adapter and len(e.tokens) <= len(ids) and _common_prefix(e.tokens, ids) == len(e.tokens)]:  # fmt: skip
                self.nbytes -= self._entries.pop(key).nbytes  # the new entry covers it
            while self._entries and self.nbytes + nbytes > self.max_bytes:
                self.nbytes -= self._entries.popitem(last=False)[1].nbytes
            self._entries[self._next] = Entry(adapter, ids, keys, values, nbytes)
            self._next += 1
            self.nbytes += nbytes
        return True


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    m = min(len(a), len(b))
    differ = (a[:m] != b[:m]).nonzero()
    return int(differ[0, 0]) if len(differ) else m
