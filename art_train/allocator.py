"""Run a program with tcmalloc or jemalloc as its malloc, the way PyTorch's CPU guides recommend.

glibc's malloc keeps freed blocks resident between live ones: the agent-shaped GRPO step of
`benchmarks/train_step.py` peaks at 6.4 GB under it, at 4.3 GB under tcmalloc at 1.09x the speed, and
under jemalloc at 4.3 GB and 0.95x (docs/training.md). A malloc can only be swapped before the
process starts (``LD_PRELOAD``), so `preload_allocator` re-runs the program with it preloaded: `art`
does this for the commands that load a model, and a script can call it first thing.

``ART_MALLOC`` picks: ``auto`` (the default: tcmalloc if installed, else jemalloc, else glibc's),
``tcmalloc``, ``jemalloc``, a path to a library, or ``glibc`` (leave malloc alone). tcmalloc comes
with Debian's and Ubuntu's ``libtcmalloc-minimal4``; jemalloc with ``libjemalloc2`` and inside Ray's
wheel. The re-run drops the library from ``LD_PRELOAD`` again once started, so the processes it
starts (engines, MCP servers, Ray workers) get the environment they would have got.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import sys
from pathlib import Path

__all__ = ["find_allocator", "malloc_library", "preload_allocator", "preloaded_name"]

logger = logging.getLogger(__name__)

ENV = "ART_MALLOC"
_MARK = "ART_MALLOC_PRELOADED"  # set for the re-run: the library it preloads
_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
_FILES = {"tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"), "jemalloc": ("libjemalloc.so.2",)}
_OFF = {"glibc", "0", "off", "none"}


def _ray_jemalloc() -> Path | None:
    spec = importlib.util.find_spec("ray")  # finds the package without importing it
    if spec is None or not spec.origin:
        return None
    lib = Path(spec.origin).parent / "core" / "libjemalloc.so"
    return lib if lib.is_file() else None


def find_allocator(choice: str = "auto") -> str | None:
    """The library file for `choice` ("auto", "tcmalloc", "jemalloc" or a path), None if not installed."""
    if "/" in choice:
        return choice if Path(choice).is_file() else None
    if choice not in ("auto", *_FILES):
        raise ValueError(f"{ENV}={choice!r}: use auto, tcmalloc, jemalloc, glibc or a path to a malloc library")
    for name in _FILES if choice == "auto" else (choice,):
        for folder in _DIRS:
            for file in _FILES[name]:
                if (Path(folder) / file).is_file():
                    return str(Path(folder) / file)
        if name == "jemalloc" and (bundled := _ray_jemalloc()) is not None:
            return str(bundled)
    return None


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def malloc_library() -> str | None:
    """The file this process's ``malloc`` comes from (libc's, or a preloaded one); None off glibc systems."""
    try:
        process = ctypes.CDLL(None)
        address = ctypes.cast(process.malloc, ctypes.c_void_p)
        info = _DlInfo()
        if not process.dladdr(address, ctypes.byref(info)) or not info.dli_fname:
            return None
    except (OSError, AttributeError):
        return None
    return os.fsdecode(info.dli_fname)


def preloaded_name() -> str | None:
    """"tcmalloc" or "jemalloc" where this process's malloc comes from one of them, else None."""
    lib = Path(malloc_library() or "").name
    return next((name for name in _FILES if name in lib), None)


def _without(preload: str, lib: str) -> str:
    return " ".join(p for p in preload.replace(":", " ").split() if p != lib)


def preload_allocator() -> str | None:
    """Re-run this program (``sys.orig_argv``) with ``ART_MALLOC``'s malloc preloaded, unless it already
    runs with it; returns the library in use (None: glibc's). Call it before anything else runs: the
    process is replaced. In the re-run it only takes the library out of ``LD_PRELOAD`` again."""
    lib = os.environ.pop(_MARK, None)
    if lib is not None:  # the re-run
        rest = _without(os.environ.get("LD_PRELOAD", ""), lib)
        if rest:
            os.environ["LD_PRELOAD"] = rest
        else:
            os.environ.pop("LD_PRELOAD", None)
        current = malloc_library()
        if current != lib:
            logger.warning("%s=%s: %s was preloaded but malloc still comes from %s", ENV,
                           os.environ.get(ENV, "auto"), lib, current)
            return None
        return lib
    choice = os.environ.get(ENV, "auto").strip() or "auto"
    choice = choice if "/" in choice else choice.lower()
    if choice in _OFF or not sys.platform.startswith("linux"):
        return None
    if preloaded_name() is not None:
        return malloc_library()  # the user preloaded one already
    lib = find_allocator(choice)
    if lib is None:
        if choice != "auto":
            logger.warning("%s=%s: the library is not installed (Debian/Ubuntu: apt install "
                           "libtcmalloc-minimal4 or libjemalloc2); using glibc's malloc", ENV, choice)
        return None
    env = dict(os.environ, LD_PRELOAD=" ".join(filter(None, [lib, os.environ.get("LD_PRELOAD", "")])))
    env[_MARK] = lib
    env.setdefault("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", str(1 << 40))  # no stderr line per block over 1 GB
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    return lib  # not reached
