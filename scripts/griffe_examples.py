"""A griffe extension for the API reference: the code under a docstring's `Example:` is shown as code.

The docstrings here write their examples as indented code after `Example:` (not as `>>>` doctests);
Markdown would render that as a paragraph, so this wraps it in a Python code fence when griffe loads it.
"""

from __future__ import annotations

import re

import griffe

_SECTION = re.compile(r"^(?P<indent>[ \t]*)Examples?:[ \t]*$")


def fence_examples(text: str) -> str:
    """`text` with the indented block under each `Example:` line fenced as Python (doctests left alone)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        head = _SECTION.match(lines[i])
        i += 1
        if not head:
            continue
        block = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(head["indent"])):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            i -= 1
            block.pop()
        code = [b for b in block if b.strip()]
        if not code or code[0].lstrip().startswith(">>>"):
            out += block
            continue
        pad = min(len(b) - len(b.lstrip()) for b in code) * " "
        out += [f"{pad}```python", *block, f"{pad}```"]
    return "\n".join(out)


class FenceExamples(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_examples(obj.docstring.value)
