"""Every relative link and every repository file named in the Markdown exists.

Checked: README.md, CONTRIBUTING.md, CHANGELOG.md, docs/**/*.md and examples/*/*.md. A relative
link `[text](path#anchor)` must name a file or folder next to the page. A file named in backticks
(`docs/mcp.md`, `tests/core/test_packages.py`, `scripts/test.sh`) must exist relative to the page or
to the repository root, and a bare Markdown file name (`ARCHITECTURE.md`) must be a file of the
repository, so no page sends a reader to a file they do not have.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md") if p.exists()]
    + list((ROOT / "docs").rglob("*.md"))
    + list((ROOT / "examples").glob("*/*.md"))
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
# a path inside the repository: starts with one of its top-level folders, ends in a file suffix
TOP = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} | {".ci"}
SUFFIX = r"\.(md|py|sh|toml|json|jsonl|jinja|yml|yaml|html|css|js|txt|cfg|ini)"
REPO_PATH = re.compile(rf"^\.?/?((?:{'|'.join(re.escape(t) for t in sorted(TOP))})/[\w./-]*{SUFFIX})$")
MD_NAME = re.compile(r"(?<![\w/.<-])([A-Za-z][\w-]*\.md)\b")
REPO_FILES = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts and ".git" not in p.parts}


def _strip_fences(text: str) -> str:
    """The page without its fenced code blocks (code there is checked by the docs tests, not here)."""
    return re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)


def _problems(page: Path) -> list[str]:
    text = _strip_fences(page.read_text())
    found = []
    for m in LINK.finditer(text):
        target = (m.group(1) or m.group(2)).split("#")[0]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # anchor only, or http:, mailto:
            continue
        if not (page.parent / target).exists():
            found.append(f"link ({target}) names no file")
    for m in CODE.finditer(text):
        token = m.group(1).strip()
        path = REPO_PATH.match(token)
        if path and not ((ROOT / path.group(1)).exists() or (page.parent / token).exists()):
            found.append(f"`{token}` names no file")
        elif re.fullmatch(r"[A-Za-z][\w-]*\.md", token) and token not in REPO_FILES:
            found.append(f"`{token}` is not a file of the repository")
    for m in MD_NAME.finditer(CODE.sub("", LINK.sub("", text))):
        if m.group(1) not in REPO_FILES:
            found.append(f"{m.group(1)} is not a file of the repository")
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_markdown_names_only_files_that_exist(page):
    problems = _problems(page)
    assert not problems, f"{page.relative_to(ROOT)}: " + "; ".join(problems)


def test_the_check_finds_a_missing_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "See [the notes](missing.md), `docs/nowhere.md`, `STYLE_NOTES.md` and ARCHITECTURE_NOTES.md.\n"
        "```python\nopen('ignored/in/code.md')\n```\n[fine](page.md) and [web](https://example.com/x.md)\n"
    )
    problems = _problems(page)
    assert problems == [
        "link (missing.md) names no file",
        "`docs/nowhere.md` names no file",
        "`STYLE_NOTES.md` is not a file of the repository",
        "ARCHITECTURE_NOTES.md is not a file of the repository",
    ]
