"""examples/mcp_rl runs (as a smoke run on a random tiny model) so it cannot silently rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_calculator_example_smoke(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_rl" / "train_calculator.py"), "--tiny", "--steps", "1",
         "--tasks-per-step", "2", "--group-size", "2", "--max-tokens", "8", "--output", str(tmp_path / "art")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "step 1: mean reward" in out.stdout and "held-out reward: before" in out.stdout
    assert (tmp_path / "art" / "mcp-rl" / "models" / "calculator-agent" / "checkpoints" / "0001").is_dir()
