"""Chat templates ART ships (Jinja files next to this module), found by name.

- ``gemma3``: Gemma 3 turns with tools by prompt (Gemma 3 has no tool-call format of its own).
- ``gptoss``: TRL's GPT-OSS harmony template with a fixed "Current date" line: the original renders
  ``strftime_now``, so a prompt sampled one day would re-render differently for training the next.

Other families use TRL's templates (``qwen2_5``, ``qwen3``, ``llama3_1``; see `art_train.families`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["template_names", "template_text"]

_HERE = Path(__file__).resolve().parent


def template_names() -> list[str]:
    return sorted(p.stem for p in _HERE.glob("*.jinja"))


def template_text(name: str) -> str | None:
    """The text of ART's template `name`, or None when ART ships none by that name."""
    path = _HERE / f"{name}.jinja"
    return path.read_text() if path.is_file() else None
