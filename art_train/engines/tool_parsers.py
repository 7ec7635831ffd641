"""Tool-call parsers: turn a model's text into OpenAI `tool_calls`, one parser per model family.

The default, `hermes`, reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks
(Qwen, Hermes, and TRL's ``qwen2_5`` template that ART renders tools with). Add another with
`add_tool_parser` or the `tool_parser` decorator.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ParsedOutput", "ToolParser", "add_tool_parser", "get_tool_parser", "hermes", "tool_parser"]


@dataclass
class ParsedOutput:
    """What a parser found: the text left for `content` and the tool calls (OpenAI dicts)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


ToolParser = Callable[[str], ParsedOutput]

_PARSERS: dict[str, ToolParser] = {}


def add_tool_parser(name: str, parser: ToolParser) -> ToolParser:
    """Register `parser` under `name` (what `ModelConfig.tool_parser` selects)."""
    _PARSERS[name] = parser
    return parser


def tool_parser(name: str) -> Callable[[ToolParser], ToolParser]:
    """Register a tool-call parser; the function is returned unchanged.

    Example:
        @tool_parser("mistral")
        def mistral(text: str) -> ParsedOutput: ...
    """

    def register(fn: ToolParser) -> ToolParser:
        return add_tool_parser(name, fn)

    return register


def get_tool_parser(name: str) -> ToolParser:
    try:
        return _PARSERS[name]
    except KeyError:
        raise ValueError(
            f"unknown tool parser {name!r}; known: {sorted(_PARSERS)} (register one with art_train.engines.add_tool_parser)"
        ) from None


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": args}}


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


@tool_parser("hermes")
def hermes(text: str) -> ParsedOutput:
    """``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks; malformed ones stay as text."""
    if "<tool_call>" not in text:
        return ParsedOutput(content=text)
    calls: list[dict[str, Any]] = []
    for match in _HERMES.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except ValueError:
            return ParsedOutput(content=text)  # not a well-formed call: the model said text
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return ParsedOutput(content=text)
        calls.append(tool_call(obj["name"], obj.get("arguments", obj.get("parameters", {}))))
    content = text[: text.index("<tool_call>")].strip()
    return ParsedOutput(content=content or None, tool_calls=calls)
