"""Every package has an explicit public surface, and the layering of ARCHITECTURE.md holds."""

import importlib
import subprocess
import sys

import pytest

PACKAGES = ["art_core", "art_train", "art_graph", "art_mcp", "ruler"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_package_declares_and_provides_its_surface(name):
    module = importlib.import_module(name)
    assert isinstance(module.__all__, list) and module.__all__, f"{name} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__)
    for attr in module.__all__:
        assert getattr(module, attr) is not None, f"{name}.{attr}"


def test_art_train_surface_is_pinned():
    import art_train

    assert sorted(art_train.__all__) == ["LocalBackend", "ModelService", "__version__", "create_app"]


@pytest.mark.parametrize("plugin", ["art_graph", "art_mcp", "ruler"])
def test_plugins_depend_on_art_core_only(plugin):
    others = [p for p in PACKAGES if p not in ("art_core", plugin)]
    code = f"import sys, {plugin}; bad = [m for m in {others!r} if m in sys.modules]; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)
