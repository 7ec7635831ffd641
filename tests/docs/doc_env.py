"""What the docs' code blocks run against: a LocalBackend on the tiny random model, and small task sets.

A page's hidden setup block (`<!-- invisible-code-block: python ... -->`) calls these, so the visible
blocks run as written. `TINY` is set by the test before a page runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import art_core as art

TINY: dict[str, Path] = {}  # {"path": the tiny model's folder}
BACKENDS: list[Any] = []  # closed by the test after the page


def tiny_model_path() -> str:
    return str(TINY["path"])


async def tiny_model(name: str = "docs-agent", project: str = "docs") -> art.TrainableModel:
    """A TrainableModel on the tiny random model, registered on a fresh LocalBackend (closed after the page)."""
    from art_train import LocalBackend

    backend = LocalBackend(device="cpu")
    BACKENDS.append(backend)
    model = art.TrainableModel(name=name, project=project, base_model=tiny_model_path(),
                               config=art.ModelConfig(max_seq_len=256))
    await model.register(backend)
    return model


def sft_records(count: int = 4) -> list[dict[str, Any]]:
    """Small teacher records in the OpenAI chat fine-tuning shape: a question and the right sum."""
    return [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                          {"role": "assistant", "content": str(2 * i)}]} for i in range(count)]


def addition_tasks(count: int = 4) -> list[dict[str, str]]:
    return [{"question": f"What is {i} + 1? Reply with the number only.", "answer": str(i + 1)}
            for i in range(count)]
