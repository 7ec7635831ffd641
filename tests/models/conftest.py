"""Tiny random models of each family (built from configs, once per session)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    from art_train.models import build_tiny_model

    root = tmp_path_factory.getbasetemp() / "families"

    def build(family: str) -> Path:
        try:
            return build_tiny_model(root / family, family=family)
        except FileNotFoundError as exc:  # the Qwen and Gemma tokenizers come from the .[models] weights
            if os.environ.get("ART_REQUIRE_BUNDLED") == "1":
                raise
            pytest.skip(f"{family}: {exc}")

    return build
