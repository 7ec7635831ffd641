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


# The quick tier (`scripts/test.sh --quick`, CONTRIBUTING.md) runs the tests not marked `slow`, `vllm` or
# `heavy`. A test is `heavy` when it is marked so, or when it uses one of these fixtures: each loads the tiny
# model or starts a real server, seconds to tens of seconds a test on a 2-core machine.
HEAVY_FIXTURES = {"tiny_model_path", "tiny_tokenizer", "tiny_family", "art_serve", "served", "run"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.heavy)
