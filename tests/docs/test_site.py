"""The docs site's API reference covers each package's `__all__`; its docstring examples render as code."""

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from mkdocs_hooks import PACKAGES, api_page, public_names  # noqa: E402


@pytest.mark.parametrize("package", PACKAGES)
def test_api_page_documents_every_public_name(package):
    module = importlib.import_module(package)
    names = [n for n in module.__all__ if not n.startswith("__")]
    assert public_names(package) == names
    page = api_page(package)
    assert [line[4:] for line in page.splitlines() if line.startswith("::: ")] == [f"{package}.{n}" for n in names]


def test_examples_in_docstrings_are_fenced_and_doctests_left_alone():
    griffe_examples = pytest.importorskip("griffe_examples", reason="griffe comes with the docs extra")
    text = "Do x.\n\nExample:\n    y = f(x)[-1]\n\n    g(y)\n\nArgs:\n    x: the input\n"
    assert griffe_examples.fence_examples(text) == (
        "Do x.\n\nExample:\n    ```python\n    y = f(x)[-1]\n\n    g(y)\n    ```\n\nArgs:\n    x: the input\n"
    )
    doctest = "Example:\n    >>> 1 + 1\n    2\n"
    assert griffe_examples.fence_examples(doctest) == doctest
