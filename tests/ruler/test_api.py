"""The public surface of `ruler`, pinned; importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import ruler


def test_all_is_pinned() -> None:
    assert sorted(ruler.__all__) == sorted(
        [
            "CUT_MARKER",
            "DEFAULT_JUDGE",
            "DEFAULT_RUBRIC",
            "BadAnswer",
            "Item",
            "Judge",
            "JudgeAnswer",
            "JudgeCache",
            "JudgeError",
            "JudgePrompt",
            "RulerStats",
            "Score",
            "TrajectoryScore",
            "Usage",
            "build_naive_prompt",
            "build_prompt",
            "kendall_tau",
            "ruler_score_group",
            "score",
            "score_group",
        ]
    )
    for name in ruler.__all__:
        assert hasattr(ruler, name), name


def test_import_does_not_load_litellm_or_train() -> None:
    code = "import sys, ruler; print(sorted(m for m in ('litellm', 'art_train', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_kendall_tau_by_hand() -> None:
    assert ruler.kendall_tau([0.1, 0.5, 0.9], [0.2, 0.3, 0.4]) == 1.0
    assert ruler.kendall_tau([0.1, 0.5, 0.9], [0.4, 0.3, 0.2]) == -1.0
    # pairs (0,1) concordant, (0,2) concordant, (1,2) discordant: (2 - 1) / 3
    assert abs(ruler.kendall_tau([1, 2, 3], [1, 3, 2]) - 1 / 3) < 1e-12
    assert ruler.kendall_tau([0.5, 0.5], [0.1, 0.9]) is None  # no ranking in the first pass
