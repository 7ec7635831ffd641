"""The judge imports litellm with its bundled cost map, never fetching one over the network."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)

CHECK = """
import os, sys
from ruler.judge import Judge
assert 'litellm' not in sys.modules
Judge(model='openai/judge').use_structured()   # the judge's first use of litellm
assert 'litellm' in sys.modules
print(os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP'))
"""


def test_the_judge_sets_the_local_cost_map_before_importing_litellm() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    done = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
    # with the flag set after the import (the old order), litellm tried the network here and logged it
    assert "cost map" not in done.stderr.lower(), done.stderr[-2000:]
