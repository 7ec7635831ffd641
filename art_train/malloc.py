"""glibc's allocator, set so that a long run's RSS stays near its working set.

- Two arenas: the backend allocates from several threads (the engine's loop, the trainer's step, the
  checkpoint writer) and glibc gives each its own arena, each holding what it freed. With two, `art
  demo`'s peak fell from 5.3 to 4.4 GB over two steps, with no loss of speed.
- Optionally (`art demo` sets 1 MiB), a fixed mmap threshold: glibc raises its own up to 32 MiB once a
  large block is freed, after which activations and KV blocks come from the heap, where freed ones stay
  resident between other allocations; above a fixed threshold each such block is mapped and unmapped
  instead, at the cost of the page faults of fresh mappings. On an AVX512-BF16 CPU, `art demo` (16
  steps): 5.0 GB peak with glibc's own threshold (and float32 prefix-cache entries, since halved),
  4.35 GB at 8 MiB, 3.72 GB at 1 MiB, 8-10% more wall time; the agent-shaped step of
  `benchmarks/train_step.py` (rows up to 1,600 tokens): 6.3 -> 4.7 GB but 106 -> 80 trained tokens/s
  at 1 MiB (`benchmarks/results/step_malloc.json`). So the backend leaves the threshold to glibc.
- Optionally (``ART_MALLOC_HUGE_PAGES=1``), transparent huge pages for torch's blocks of 2 MiB and more
  (torch's own ``THP_MEM_ALLOC_ENABLE``, which it reads at its first allocation, so this is set before
  any model loads). The agent-shaped step then peaks at 0.81x and runs at 0.90x the speed
  (`benchmarks/results/step_huge_pages.json`); off by default.
- After each training step, `trim_malloc` hands the pages freed since back to the OS.

Under tcmalloc or jemalloc (`art_train/allocator.py`, which `art` preloads where installed) none of
glibc's settings apply: `tune_malloc` leaves them, and `trim_malloc` asks that allocator instead.

``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_`` / ``THP_MEM_ALLOC_ENABLE`` in the environment leave
that setting alone; ``ART_MALLOC_ARENAS`` (0: off), ``ART_MALLOC_MMAP_MB`` (a size in MiB; 0: glibc's
own) and ``ART_MALLOC_HUGE_PAGES`` (1: on) override ours.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys

__all__ = ["tune_malloc", "trim_malloc"]

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
M_ARENA_MAX = -8
_applied: dict[str, int] | None = None


@functools.cache  # loaded once: trim_malloc runs after every training step
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - glibc has both; musl and others do not
    except (OSError, AttributeError):
        return None
    return libc


def _setting(env: str, default: int) -> int:
    try:
        return int(os.environ.get(env, default))
    except ValueError:
        logger.warning("%s=%r is not a whole number; malloc left as it is", env, os.environ[env])
        return 0


def _torch_huge_pages(wanted: int) -> bool:
    """Ask torch's CPU allocator for transparent huge pages on blocks of 2 MiB and more (its
    ``THP_MEM_ALLOC_ENABLE``, read at its first allocation); True if its blocks now come that way."""
    if not wanted or "THP_MEM_ALLOC_ENABLE" in os.environ:
        return False
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
    import torch

    blocks = [torch.empty(3 << 20, dtype=torch.uint8) for _ in range(3)]  # page-aligned only on that path
    if all(b.data_ptr() % 4096 == 0 for b in blocks):
        return True
    logger.info("torch allocated before tune_malloc, so its blocks come without huge pages")
    return False


def tune_malloc(arenas: int = 2, mmap_mb: int = 0, huge_pages: bool = False) -> dict[str, int]:
    """Set glibc's arena cap and mmap threshold (`mmap_mb` MiB, 0: glibc's own) for this process, and
    `huge_pages` for torch's big blocks (takes effect only before torch's first allocation); the first
    call decides, later ones return what it set."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = {}
    libc = _libc()
    if libc is None or _preloaded() is not None:
        return _applied
    _hint_allocator()
    if _torch_huge_pages(_setting("ART_MALLOC_HUGE_PAGES", int(huge_pages))):
        _applied["huge_pages"] = 1
    wanted = {"arenas": (M_ARENA_MAX, "MALLOC_ARENA_MAX", _setting("ART_MALLOC_ARENAS", arenas)),
              "mmap_bytes": (M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", _setting("ART_MALLOC_MMAP_MB", mmap_mb) << 20)}
    for name, (param, glibc_env, value) in wanted.items():
        if value > 0 and glibc_env not in os.environ and libc.mallopt(param, value) == 1:
            _applied[name] = value
    logger.debug("malloc settings: %s", _applied)
    return _applied


@functools.cache
def _preloaded() -> str | None:
    from .allocator import preloaded_name

    return preloaded_name()


def _hint_allocator() -> None:
    from .allocator import ENV, find_allocator

    if os.environ.get(ENV, "auto") == "auto" and (lib := find_allocator("auto")) is not None:
        logger.info("malloc is glibc's; %s is installed and takes about a third off a training step's peak "
                    "memory: `art serve` uses it (`ART_MALLOC=auto art demo` too), and a script that calls "
                    "art_train.allocator.preload_allocator() first thing (docs/training.md)", lib)


def trim_malloc() -> bool:
    """Give the pages malloc holds free back to the OS (glibc's ``malloc_trim(0)``, tcmalloc's
    ``ReleaseFreeMemory``, jemalloc's purge of every arena); False where none of them is there."""
    name = _preloaded()
    if name == "tcmalloc":
        ctypes.CDLL(None).MallocExtension_ReleaseFreeMemory()
        return True
    if name == "jemalloc":  # MALLCTL_ARENAS_ALL is 4096
        return ctypes.CDLL(None).mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0)) == 0
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
