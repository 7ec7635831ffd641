"""Fixtures for trainer tests: a tiny random Llama with the SmolLM2 tokenizer, built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from art_train.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path: Path):  # noqa: ANN201
    from art_train.models import load_tokenizer

    return load_tokenizer(tiny_model_path)
