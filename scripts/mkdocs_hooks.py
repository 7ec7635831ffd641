"""MkDocs hooks: build the site from the repository's own Markdown, laid out as in the repository.

The pages keep their repository paths (README.md is the home page, docs/*.md, examples/*/*.md,
CONTRIBUTING.md, CHANGELOG.md), so every relative link that works on GitHub works on the site and
`mkdocs build --strict` checks them. The API reference pages (docs/api/<package>.md) are generated
here from each package's `__all__`, read from the source, so a new public name appears without
editing a page.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["art_core", "art_train", "art_graph", "art_mcp", "ruler"]


def public_names(package: str) -> list[str]:
    """The package's `__all__`, read from its __init__.py without importing it (dunder names left out)."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return [n for n in ast.literal_eval(node.value) if not n.startswith("__")]
    raise ValueError(f"{package}/__init__.py has no literal __all__")


def api_page(package: str) -> str:
    doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text())) or ""
    lines = [f"# `{package}`", "", doc.split("\n\n")[0], ""]
    for name in public_names(package):
        lines += [f"::: {package}.{name}", ""]
    return "\n".join(lines)


def _sources() -> list[str]:
    pages = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"]
    pages += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "docs").rglob("*")) if p.is_file()]
    pages += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "examples").glob("*/*.md"))]
    return [p for p in pages if (ROOT / p).exists()]


def on_files(files, config):
    from mkdocs.structure.files import File, Files

    site, urls = config["site_dir"], config["use_directory_urls"]
    out = Files([])
    for src in _sources():
        out.append(File(src, str(ROOT), site, urls))
    for package in PACKAGES:
        out.append(File.generated(config, f"docs/api/{package}.md", content=api_page(package)))
    return out


def on_page_markdown(markdown: str, page, config, files) -> str:
    """A link to an example's folder (`examples/tictactoe/`) goes to its README page."""
    return re.sub(r"\]\(((?:\.\./)*examples/[\w-]+/)\)", r"](\1README.md)", markdown)
