"""Quiet CLIs: dependencies' bars and FutureWarnings hidden by default, back with --verbose."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from art_core.cli_logging import pop_verbose

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[2]

# what a CLI run does: set up logging, then load a model with transformers (its "Loading weights"
# bar) and hit a deprecated transformers API (a FutureWarning), as `art demo` does on every run
SCRIPT = """
import sys, warnings
from art_core.cli_logging import setup_cli_logging
setup_cli_logging(verbose=sys.argv[2] == "1")
import logging, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
model.is_gradient_checkpointing
logging.getLogger("art_train.demo").info("art info line")
logging.getLogger("art_train.demo").warning("art warning line")
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from art_train.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama")


def _run(tiny: Path, verbose: bool) -> str:
    out = subprocess.run([sys.executable, "-W", "default", "-c", SCRIPT, str(tiny), "1" if verbose else "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
                                                                           "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def test_default_hides_dependency_noise_but_not_art_warnings(tiny: Path) -> None:
    text = _run(tiny, verbose=False)
    assert "Loading weights" not in text and "FutureWarning" not in text
    assert "art warning line" in text and "art info line" not in text


def test_verbose_brings_it_back(tiny: Path) -> None:
    text = _run(tiny, verbose=True)
    assert "Loading weights" in text and "FutureWarning" in text
    assert "art info line" in text


def test_verbose_is_accepted_anywhere_on_the_command_line() -> None:
    assert pop_verbose(["report", "--verbose", "x"]) == (["report", "x"], True)
    assert pop_verbose(["demo", "--steps", "2"]) == (["demo", "--steps", "2"], False)
    out = subprocess.run([sys.executable, "-m", "art_train.cli", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert "--verbose" in out.stdout
