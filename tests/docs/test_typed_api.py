"""The public API is fully annotated: every function in a package's `__all__`, and every public
method (and `__init__`) of a class there, annotates each parameter (`*args`/`**kwargs` too) and its
return. Properties need a return annotation. Methods a class takes from outside ART (pydantic's,
typing.Protocol's) are not checked; dataclass-generated ones are, and take their annotations
from the fields.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import pytest

PACKAGES = ["art_core", "art_graph", "art_mcp", "art_train", "ruler"]
CHECKED_DUNDERS = {"__init__", "__call__"}


def _ours(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in PACKAGES


def missing_annotations(func: Callable[..., Any], *, method: bool = False) -> list[str]:
    """The parameters of `func` without an annotation, and ``return`` if it has none."""
    try:
        sig = inspect.signature(func)  # follows __wrapped__: a decorated function shows its own
    except (TypeError, ValueError):
        return []  # no signature to read (a builtin)
    params = list(sig.parameters.values())
    if method and params and params[0].name in ("self", "cls"):
        params = params[1:]
    missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def _methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """(qualified name, function) for the public methods and properties of `cls` and its ART bases."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not _ours(klass):
            continue  # object, pydantic.BaseModel, Exception, Protocol...
        for name, attr in vars(klass).items():
            if name in seen or (name.startswith("_") and name not in CHECKED_DUNDERS):
                continue
            seen.add(name)
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            elif isinstance(attr, property):
                attr = attr.fget
            elif isinstance(attr, cached_property):
                attr = attr.func
            if inspect.isfunction(attr) and _ours(attr):  # not typing.Protocol's __init__
                yield f"{klass.__qualname__}.{name}", attr


def unannotated(package: str) -> list[str]:
    """``package.name: parameters`` for each public function or method of `package` missing annotations."""
    module = importlib.import_module(package)
    problems = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) and _ours(obj):
            for qualname, func in _methods(obj):
                missing = missing_annotations(func, method=True)
                if missing:
                    problems.append(f"{package}.{qualname}: {', '.join(missing)}")
        elif callable(obj) and _ours(obj) and not inspect.isclass(obj):
            missing = missing_annotations(obj)
            if missing:
                problems.append(f"{package}.{name}: {', '.join(missing)}")
    return problems


@pytest.mark.parametrize("package", PACKAGES)
def test_public_api_is_annotated(package: str) -> None:
    problems = unannotated(package)
    assert not problems, "public functions and methods without annotations:\n" + "\n".join(problems)


def test_the_check_finds_a_missing_annotation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", [*PACKAGES, "tests"])  # Sample is ours

    class Sample:
        def __init__(self, x: int):
            self.x = x

        def method(self, y, *args: int, **kwargs) -> int:
            return y

        @property
        def value(self):
            return self.x

        def _private(self, z):
            return z

    found = {name.rsplit(".", 1)[1]: func for name, func in _methods(Sample)}
    assert sorted(found) == ["__init__", "method", "value"]
    assert missing_annotations(found["__init__"], method=True) == ["return"]
    assert missing_annotations(found["method"], method=True) == ["y", "kwargs"]
    assert missing_annotations(found["value"], method=True) == ["return"]
