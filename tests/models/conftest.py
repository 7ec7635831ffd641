"""Tiny random models of each family (built from configs, once per session)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    from art_train.models import build_tiny_model

    root = tmp_path_factory.getbasetemp() / "families"

    def build(family: str) -> Path:
        return build_tiny_model(root / family, family=family)

    return build
