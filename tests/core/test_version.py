"""One version: pyproject reads art_core.__version__; `art --version` and the installed metadata agree."""

import importlib.metadata
import subprocess
import sys

import art_core
import art_train


def test_every_place_that_states_the_version_agrees():
    assert art_train.__version__ == art_core.__version__
    assert importlib.metadata.version("art-rl") == art_core.__version__
    out = subprocess.run([sys.executable, "-m", "art_train.cli", "--version"], capture_output=True, text=True)
    assert out.stdout.strip() == f"art {art_core.__version__}", out.stderr
