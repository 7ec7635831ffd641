"""examples/mcp_rl runs (as a smoke run on a random tiny model) so it cannot silently rot, under either mcp SDK.

scripts/test.sh runs tests/mcp again under mcp 1.x; tests/examples/test_mcp_rl.py checks the results.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_calculator_example_smoke(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_rl" / "train_calculator.py"), "--tiny", "--sft-tasks", "2",
         "--eval-tasks", "2", "--output", str(tmp_path / "art")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sft_rl: accuracy " in out.stdout and (tmp_path / "art" / "results.json").is_file()
    assert (tmp_path / "art" / "mcp-rl" / "models" / "calculator-tiny-s0" / "checkpoints" / "0002").is_dir()
