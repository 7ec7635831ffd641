"""Stand-ins for `datasets` and `pandas`, which TRL's grpo_trainer imports at module level.

The GPU machine has neither and pyarrow (which `datasets` needs) is too large to carry; the loss
and backward the benchmark calls use neither. Installed only when the real module cannot be imported.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types

_NAMES = {
    "datasets": ("Dataset", "DatasetDict", "IterableDataset", "IterableDatasetDict", "Features", "Value"),
    "pandas": ("DataFrame", "Series"),
}


def stub_missing() -> list[str]:
    """Puts a stand-in module in sys.modules for each of datasets and pandas that is not installed."""
    stubbed = []
    for name, attrs in _NAMES.items():
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__version__ = "0.0.0"
        for attr in attrs:
            setattr(module, attr, type(attr, (), {}))
        sys.modules[name] = module
        stubbed.append(name)
    return stubbed
