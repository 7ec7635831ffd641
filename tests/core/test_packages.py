"""Every package has an explicit public surface, and the layering of docs/design.md holds.

The layering tests read the source: every import statement, at module level, inside functions or
under TYPE_CHECKING, so an import that only runs on some code path is checked too.
"""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ["art_core", "art_train", "art_graph", "art_mcp", "ruler"]
PLUGINS = ["art_graph", "art_mcp", "ruler"]
ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> dict[str, list[tuple[str, int]]]:
    """{module: [(imported module, line), ...]} for every .py file of `package`, relative imports resolved."""
    out: dict[str, list[tuple[str, int]]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = list(parts[:-1])  # the package the file sits in
        found: list[tuple[str, int]] = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found += [(a.name, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                    if node.module:
                        found.append((base, node.lineno))
                    else:  # from . import x: x is a module (or else a name of the package itself)
                        found += [(f"{base}.{a.name}", node.lineno) for a in node.names]
                else:
                    found.append((node.module or "", node.lineno))
        out[module] = found
    return out


def _uses(package: str) -> set[tuple[str, str, int]]:
    """(module, imported package of ours, line) for every import of another of our packages."""
    return {(m, name.split(".")[0], line) for m, names in _imports(package).items() for name, line in names
            if name.split(".")[0] in PACKAGES and name.split(".")[0] != package}


@pytest.mark.parametrize("name", PACKAGES)
def test_every_package_declares_and_provides_its_surface(name):
    module = importlib.import_module(name)
    assert isinstance(module.__all__, list) and module.__all__, f"{name} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__)
    for attr in module.__all__:
        assert getattr(module, attr) is not None, f"{name}.{attr}"


def test_art_train_surface_is_pinned():
    import art_train

    assert sorted(art_train.__all__) == ["BackendConfig", "LocalBackend", "ModelService", "__version__", "create_app"]


@pytest.mark.parametrize("plugin", ["art_graph", "art_mcp", "ruler"])
def test_plugins_depend_on_art_core_only(plugin):
    others = [p for p in PACKAGES if p not in ("art_core", plugin)]
    code = f"import sys, {plugin}; bad = [m for m in {others!r} if m in sys.modules]; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_plugins_import_only_art_core_anywhere_in_their_source(plugin):
    bad = sorted(u for u in _uses(plugin) if u[1] != "art_core")
    assert not bad, f"{plugin} imports other packages (module, package, line): {bad}"


def test_art_core_imports_none_of_the_other_packages():
    assert not _uses("art_core")


def test_art_train_composes_plugins_only_in_the_art_cli():
    bad = sorted(u for u in _uses("art_train") if u[1] != "art_core" and u[0] != "art_train.cli")
    assert not bad, f"only art_train.cli (the `art` command) may import a plugin: {bad}"


def _trainer_imports_of_engines(imports: dict[str, list[tuple[str, int]]]) -> list[tuple[str, str, int]]:
    return sorted((m, name, line) for m, names in imports.items() if m.startswith("art_train.trainer")
                  for name, line in names if name.startswith(("art_train.engines", "art_train.service",
                                                               "art_train.swap", "art_train.server")))


def test_the_trainer_imports_no_engine_and_no_service_code():
    # the trainer is below the swap: what it shares with the engines (the LoRA format) lives in art_train.lora
    bad = _trainer_imports_of_engines(_imports("art_train"))
    assert not bad, f"art_train/trainer/ imports engine or service code (module, import, line): {bad}"


def test_the_trainer_layering_check_catches_an_engine_import(tmp_path, monkeypatch):
    pkg = tmp_path / "art_train" / "trainer"
    pkg.mkdir(parents=True)
    (tmp_path / "art_train" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "probe.py").write_text("def f():\n    from ..engines.adapters import load_lora\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _trainer_imports_of_engines(_imports("art_train")) == [
        ("art_train.trainer.probe", "art_train.engines.adapters", 2)]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_modules_of_a_package(package):
    imports = _imports(package)
    modules = set(imports)

    def target(name: str) -> str:  # "pkg.x" from `from . import x` is the package itself if x is no module
        return name if name in modules else name.rpartition(".")[0]

    graph = {m: {target(n) for n, _ in names if target(n) in modules and target(n) != m}
             for m, names in imports.items()}
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, f"modules of {package} that import each other: {cycles}"


def test_the_checks_see_imports_inside_functions(tmp_path, monkeypatch):
    # the walk must find an import that only runs when a function is called
    pkg = tmp_path / "ruler"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def later():\n    from art_train import LocalBackend\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _uses("ruler") == {("ruler", "art_train", 2)}
