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


@pytest.fixture
def make_trainer(tiny_model_path: Path, tmp_path: Path):  # noqa: ANN201
    """`make_trainer(**fields)`: a CPU `Trainer` of the tiny model with those `ModelConfig` fields, closed
    after the test."""
    import art_core as art
    from art_train.trainer import Trainer

    made: list[Trainer] = []

    def make(**fields: object) -> Trainer:
        name = f"m{len(made)}"
        config = art.ModelConfig(**fields)  # type: ignore[arg-type]
        model = art.TrainableModel(name=name, project="t", base_model=str(tiny_model_path), config=config)
        made.append(Trainer(model, art.RunDir("t", name, root=tmp_path), device="cpu"))
        return made[-1]

    yield make
    for trainer in made:
        trainer.close()
