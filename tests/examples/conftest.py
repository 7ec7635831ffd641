"""The examples' tests reuse the trainer tests' tiny random model (one build per session)."""

from tests.train.conftest import tiny_model_path  # noqa: F401
