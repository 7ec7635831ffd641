"""Tool-call parsers: turn a model's text into OpenAI `tool_calls`, one parser per model family.

| parser | family | what it reads |
|---|---|---|
| `hermes` | Qwen2.5, SmolLM2 (TRL's ``qwen2_5`` template) | ``<tool_call>{"name", "arguments"}</tool_call>``, or a bare JSON call |
| `qwen3` | Qwen3 | as `hermes`, after the ``<think>`` block (the block stays in `content`) |
| `llama3_json` | Llama 3.x | ``{"name", "parameters"}`` JSON, optionally after ``<|python_tag|>``, ``;``-separated |
| `harmony` | GPT-OSS | channels: ``analysis`` -> reasoning, ``final`` -> content, ``to=functions.NAME`` -> a call |
| `gemma3` | Gemma 3 (tools by prompt) | a JSON call, bare or in a ```` ```tool_code ```` fence |

A parser never raises on model text: text that looks like a call but is not one stays in
`content`, and `error` says why (the engine counts it in ``stats["tool_parse_errors"]`` and sends
it as the choice's ``tool_parse_error``). A parser whose format wraps every reply in markup
(harmony) has ``markup = True``: the engine then takes `content` from it even without tools and
streams the reply once parsed. Add another parser with `add_tool_parser` or the `tool_parser` decorator.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ParsedOutput",
    "ToolParser",
    "add_tool_parser",
    "gemma3",
    "get_tool_parser",
    "harmony",
    "hermes",
    "llama3_json",
    "qwen3",
    "tool_parser",
    "tool_parser_names",
]


@dataclass
class ParsedOutput:
    """What a parser found.

    content: the text left for ``message.content`` (None when only calls remain).
    tool_calls: OpenAI tool-call dicts.
    reasoning: reasoning the family keeps apart from content (harmony's analysis channel), else None.
    error: why text that looked like a tool call was kept as content (None when nothing was wrong).
    """

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str | None = None
    error: str | None = None


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


def tool_parser_names() -> list[str]:
    return sorted(_PARSERS)


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": args}}


def _as_call(obj: Any) -> dict[str, Any] | None:
    """A tool call from a decoded ``{"name": ..., "arguments"|"parameters": {...}}``, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return tool_call(obj["name"], args)


_DECODER = json.JSONDecoder()


def _json_values(text: str, sep: str = "") -> list[Any] | None:
    """Every JSON value in `text`, one after another (whitespace or `sep` between); None if any is not JSON."""
    values: list[Any] = []
    i = 0
    while True:
        while i < len(text) and (text[i].isspace() or (sep and text[i] == sep)):
            i += 1
        if i == len(text):
            return values
        try:
            value, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        values.append(value)


_NAME_KEY = re.compile(r'^\[?\s*\{\s*"name"\s*:')
_FENCE = re.compile(r"^```(json|tool_code|tool_call)?\s*\n?(.*?)\n?```$", re.DOTALL)


def _bare_calls(text: str, sep: str = "") -> tuple[list[dict[str, Any]], str | None] | None:
    """Calls when the whole text is JSON call objects (optionally fenced); None when it is not JSON at all.

    Returns ``([], reason)`` for JSON that is not a call, so the caller can flag it.
    """
    body = text.strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(2).strip()
    if not body.startswith(("{", "[")):
        if fence and fence.group(1) in ("tool_code", "tool_call"):
            return [], f"a ```{fence.group(1)}``` block that is not a JSON call"
        return None
    values = _json_values(body, sep)
    if values is None:
        looks_like_call = fence or _NAME_KEY.match(body)
        return ([], "text opens like a JSON tool call but is not valid JSON") if looks_like_call else None
    objs = [v for value in values for v in (value if isinstance(value, list) else [value])]
    calls = [_as_call(o) for o in objs]
    if not calls or any(c is None for c in calls):
        return [], "JSON without a tool name and object arguments"
    return [c for c in calls if c is not None], None


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


@tool_parser("hermes")
def hermes(text: str) -> ParsedOutput:
    """``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks, or a bare JSON call.

    Qwen2.5-Coder often emits the JSON without the tags; a reply that is nothing but call objects
    (optionally in a ```` ```json ```` fence) is read as calls too. Malformed blocks stay as text.
    """
    if "<tool_call>" not in text:
        bare = _bare_calls(text)
        if bare is None:
            return ParsedOutput(content=text)
        calls, error = bare
        return ParsedOutput(content=None, tool_calls=calls) if calls else ParsedOutput(content=text, error=error)
    calls = []
    for match in _HERMES.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except ValueError:
            return ParsedOutput(content=text, error="a <tool_call> block is not valid JSON")
        call = _as_call(obj)
        if call is None:
            return ParsedOutput(content=text, error="a <tool_call> block has no tool name or object arguments")
        calls.append(call)
    content = text[: text.index("<tool_call>")].strip()
    return ParsedOutput(content=content or None, tool_calls=calls)


@tool_parser("qwen3")
def qwen3(text: str) -> ParsedOutput:
    """Qwen3: ``<think>...</think>`` then `hermes` calls. Calls inside the thinking block are not calls;
    the block stays at the head of `content`, as the model emitted it."""
    head, sep, tail = text.partition("</think>")
    if not sep:
        return hermes(text)
    parsed = hermes(tail)
    thought = head + sep
    rest = (parsed.content or "").strip()
    parsed.content = thought + ("\n\n" + rest if rest else "")
    return parsed


_PY_CALL = re.compile(r"^\s*([A-Za-z_][\w.]*)\.call\((.*)\)\s*$", re.DOTALL)
_PY_ARG = re.compile(r'\s*([A-Za-z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@tool_parser("llama3_json")
def llama3_json(text: str) -> ParsedOutput:
    """Llama 3.x: ``{"name": ..., "parameters": {...}}`` (several separated by ``;``), optionally after
    ``<|python_tag|>``; built-in tools as ``<|python_tag|>name.call(arg="v")``."""
    tagged = "<|python_tag|>" in text
    before, _, body = text.partition("<|python_tag|>") if tagged else ("", "", text)
    if tagged:
        body = body.replace("<|eom_id|>", "").strip()
        py = _PY_CALL.match(body)
        if py:
            args = dict(_PY_ARG.findall(py.group(2)))
            return ParsedOutput(content=before.strip() or None, tool_calls=[tool_call(py.group(1), args)])
    bare = _bare_calls(body, sep=";")
    if bare is None:
        if tagged:
            return ParsedOutput(content=text, error="text after <|python_tag|> is neither JSON calls nor name.call(...)")
        return ParsedOutput(content=text)
    calls, error = bare
    if not calls:
        return ParsedOutput(content=text, error=error)
    return ParsedOutput(content=before.strip() or None, tool_calls=calls)


_HARMONY_END = re.compile(r"<\|(?:end|call|return)\|>")
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")


@tool_parser("harmony")
def harmony(text: str) -> ParsedOutput:
    """GPT-OSS harmony: ``<|channel|>analysis<|message|>...<|end|>`` is reasoning, the ``final``
    channel is content, a message addressed ``to=functions.NAME`` (commentary channel) is a call
    whose body is its JSON arguments. Text with no ``<|message|>`` marker is plain content."""
    if "<|message|>" not in text:
        return ParsedOutput(content=text)
    reasoning: list[str] = []
    content: list[str] = []
    calls: list[dict[str, Any]] = []
    error = None
    for part in text.split("<|start|>"):
        header, sep, body = part.partition("<|message|>")
        if not sep:
            continue
        body = _HARMONY_END.split(body, maxsplit=1)[0]
        recipient = _RECIPIENT.search(header)
        if recipient:
            values = _json_values(body.strip())
            call = _as_call({"name": recipient.group(1), "arguments": values[0]}) if values and len(values) == 1 else None
            if call is None:
                error = f"the call to {recipient.group(1)!r} has arguments that are not a JSON object"
                content.append(body)
            else:
                calls.append(call)
        elif "analysis" in header:
            reasoning.append(body)
        else:  # final, or a commentary preamble meant for the user
            content.append(body)
    return ParsedOutput(
        content="\n".join(content) if content else None,
        tool_calls=calls,
        reasoning="\n".join(reasoning) if reasoning else None,
        error=error,
    )


harmony.markup = True  # type: ignore[attr-defined]


@tool_parser("gemma3")
def gemma3(text: str) -> ParsedOutput:
    """Gemma 3 (tools by prompt, ART's ``gemma3`` template): a reply that is only a JSON call, bare or in
    a ```` ```tool_code ```` / ```` ```json ```` fence, or a ``<tool_call>`` block; else content."""
    if "<tool_call>" in text:
        return hermes(text)
    stripped = text.strip()
    fence = re.search(r"```(?:tool_code|json)\s*\n(.*?)```", stripped, re.DOTALL)
    prefix = ""
    if fence and not stripped.startswith("```"):  # prose, then the fenced call
        prefix, stripped = stripped[: fence.start()].strip(), stripped[fence.start():]
    bare = _bare_calls(stripped)
    if bare is None:
        return ParsedOutput(content=text)
    calls, error = bare
    if not calls:
        return ParsedOutput(content=text, error=error)
    return ParsedOutput(content=prefix or None, tool_calls=calls)
