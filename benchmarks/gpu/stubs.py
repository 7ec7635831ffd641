"""Stand-ins for `datasets`, `pandas` and `pyarrow`, which TRL's grpo_trainer imports at module level.

The GPU machine has neither and pyarrow (which `datasets` needs) is too large to carry; the loss
and backward the benchmark calls use neither. Installed only when the real module cannot be imported.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types

# top-level module -> submodules TRL imports from it
_MODULES = {"datasets": ("fingerprint",), "pandas": (), "pyarrow": ("compute", "types")}


class _Stub(types.ModuleType):
    """Any attribute is a placeholder class (TRL uses them in annotations and isinstance checks)."""

    def __getattr__(self, attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = type(attr, (), {})
        setattr(self, attr, value)
        return value


def _make(name: str) -> types.ModuleType:
    module = _Stub(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    module.__version__ = "0.0.0"
    sys.modules[name] = module
    return module


def stub_missing() -> list[str]:
    """Puts a stand-in module in sys.modules for each of datasets, pandas and pyarrow not installed."""
    stubbed = []
    for name, subs in _MODULES.items():
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        top = _make(name)
        for sub in subs:
            setattr(top, sub, _make(f"{name}.{sub}"))
        stubbed.append(name)
    return stubbed


class _Hide:
    """A meta-path finder that makes the named top-level modules look not installed."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in self.names and name not in sys.modules:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def hide(names: list[str]) -> None:
    """Makes `names` look not installed in this process, as on the GPU machine (the CPU twin's test uses it)."""
    import importlib.util

    wanted = set(names)
    sys.meta_path.insert(0, _Hide(wanted))
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        if name.split(".")[0] in wanted and name not in sys.modules:
            return None
        return real(name, package)

    importlib.util.find_spec = find_spec
