"""Fixtures every test directory can use: the environment for offline runs and the tiny random model."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init tiny Llama (hidden 64, 2 layers) with the SmolLM2 tokenizer, built once per session."""
    from art_train.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama")
