"""Every Python block of README.md and docs/*.md runs, in order, one namespace per page.

Blocks may use top-level `await` (they run on one event loop per page). A page sets up what its
blocks assume in a hidden block, `<!-- invisible-code-block: python ... -->`, usually with the helpers
of tests/docs/doc_env.py (a LocalBackend on the tiny random model). A block that cannot run here is
marked just above it with `<!-- skip: next REASON -->`, and the reason is reported.
"""

from __future__ import annotations

import ast
import asyncio
import os
import unittest
from pathlib import Path

import pytest

from tests.docs import doc_env

sybil = pytest.importorskip("sybil", reason="sybil comes with the dev extra (scripts/setup.sh)")
from sybil.parsers.markdown import CodeBlockParser, SkipParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES = [p for p in PAGES if "```python" in p.read_text()]


class AwaitingEvaluator:
    """Runs a block's source in the page's namespace; a block with top-level await runs on the page's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def __call__(self, example) -> None:
        source = "\n" * (example.line + example.parsed.line_offset) + example.parsed
        code = compile(source, example.path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        result = eval(code, example.namespace)
        if asyncio.iscoroutine(result):
            self.loop.run_until_complete(result)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_code_blocks_run(page: Path, tiny_model_path: Path, tmp_path: Path, monkeypatch) -> None:
    rel = str(page.relative_to(ROOT))
    monkeypatch.chdir(tmp_path)  # files the blocks write land here
    monkeypatch.setenv("ART_HOME", str(tmp_path / ".art"))
    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after the page, which may prepend to it
    doc_env.TINY["path"] = tiny_model_path
    loop = asyncio.new_event_loop()
    evaluator = AwaitingEvaluator(loop)
    parsers = [CodeBlockParser(language="python", evaluator=evaluator), SkipParser()]  # also invisible blocks
    document = sybil.Sybil(parsers=parsers).parse(page)
    skipped, ran = [], 0
    try:
        for example in document.examples():
            try:
                example.evaluate()
                ran += 1
            except unittest.SkipTest as e:  # <!-- skip: next REASON -->
                skipped.append(f"{rel}:{example.line}: {e}")
            except Exception as e:  # name the block, not the harness
                raise AssertionError(f"{rel}:{example.line}: the block fails: {type(e).__name__}: {e}") from e
    finally:
        for backend in doc_env.BACKENDS:
            loop.run_until_complete(backend.close())
        doc_env.BACKENDS.clear()
        for undo in doc_env.RESTORE:
            undo()
        doc_env.RESTORE.clear()
        loop.close()
    for line in skipped:
        print("skipped", line)  # shown with -rP / -s
    assert ran or skipped, f"{rel}: no block ran"
