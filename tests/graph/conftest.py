import warnings

import pytest

import art_core as art
from tests.serve.conftest import art_serve  # noqa: F401 - fixture: a real `art serve` (tiny_model_path: tests/conftest.py)

# langgraph.prebuilt.create_react_agent is deprecated in langgraph 1.x but still the prebuilt agent many apps use.
warnings.filterwarnings("ignore", message=".*create_react_agent.*")


def trainable(url: str, name: str = "agent") -> art.TrainableModel:
    return art.TrainableModel(
        name=name, project="t", base_model="x", inference_base_url=url, inference_api_key="k"
    )


def hosted(url: str, name: str = "planner") -> art.Model:
    return art.Model(name=name, project="t", inference_base_url=url, inference_api_key="k")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("LANGSMITH_TRACING", raising=False)
    monkeypatch.delenv("LANGCHAIN_TRACING_V2", raising=False)
