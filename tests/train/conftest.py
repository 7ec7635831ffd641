"""Fixtures for trainer tests: the tiny model's tokenizer (the model itself: tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path: Path):  # noqa: ANN201
    from art_train.models import load_tokenizer

    return load_tokenizer(tiny_model_path)
