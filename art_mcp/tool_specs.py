"""MCP tool schemas and names as OpenAI-style tool calling accepts them.

OpenAI wants a function's `parameters` to be an object schema without a top-level ``anyOf``,
``oneOf`` or ``allOf``, and its name to match ``^[a-zA-Z0-9_-]{1,64}$``. MCP servers send
``$schema``, unions of argument shapes, dotted or slashed names and names past 64 characters.
`openai_parameters` converts a schema; `ToolNames` maps names both ways (a valid, unused name
keeps itself).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

__all__ = ["ToolNames", "openai_parameters"]

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_DROP = ("$schema", "$id")
_UNIONS = ("anyOf", "oneOf")


def openai_parameters(schema: dict[str, Any] | None) -> dict[str, Any]:
    """`schema` as an OpenAI function's parameters.

    - ``$schema`` and ``$id`` are dropped;
    - a top-level ``anyOf`` / ``oneOf`` of object schemas becomes one object with every
      alternative's properties, none required, and a description naming the alternatives;
      ``allOf`` merges its parts' properties and required lists;
    - a schema that is not an object (``{"type": "string"}``) is wrapped as the one required
      property ``value`` (the model's arguments then read ``{"value": ...}``).
    """
    s = {k: v for k, v in (schema or {}).items() if k not in _DROP}
    union = next((k for k in _UNIONS if isinstance(s.get(k), list)), None)
    if union is not None and all(_is_object(part) for part in s[union]):
        parts = s.pop(union)
        s.pop("type", None)
        properties: dict[str, Any] = dict(s.pop("properties", {}) or {})
        for part in parts:
            properties.update(part.get("properties") or {})
        choices = "; ".join(f"({i}) {_shape(part)}" for i, part in enumerate(parts, 1))
        note = f"Give the arguments of one of these alternatives: {choices}."
        s.pop("required", None)
        desc = s.pop("description", None)
        return {"type": "object", "properties": properties, **s,
                "description": f"{desc} {note}" if desc else note}
    if isinstance(s.get("allOf"), list) and all(_is_object(part) for part in s["allOf"]):
        parts = s.pop("allOf")
        properties = dict(s.pop("properties", {}) or {})
        required = list(s.pop("required", []) or [])
        for part in parts:
            properties.update(part.get("properties") or {})
            required += [r for r in part.get("required") or [] if r not in required]
        s.pop("type", None)
        return {"type": "object", "properties": properties, **({"required": required} if required else {}), **s}
    if not s or _is_object(s):
        s.setdefault("type", "object")
        s.setdefault("properties", {})
        return {"type": s.pop("type"), "properties": s.pop("properties"), **s}
    return {"type": "object", "properties": {"value": s}, "required": ["value"]}


def _is_object(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    return kind == "object" or (kind is None and "properties" in schema) or (
        kind is None and not any(k in schema for k in ("items", "enum", "const", *_UNIONS, "allOf")))


def _shape(part: dict[str, Any]) -> str:
    required = part.get("required") or []
    if required:
        return "requires " + ", ".join(required)
    return "any of " + ", ".join(part.get("properties") or {}) if part.get("properties") else "no arguments"


class ToolNames:
    """MCP tool names <-> names OpenAI accepts, reversibly, for one server's tool list."""

    def __init__(self, names: list[str]) -> None:
        self.to_openai: dict[str, str] = {}
        taken = {n for n in names if NAME.match(n)}
        for name in names:
            if NAME.match(name):
                self.to_openai[name] = name
                continue
            clean = re.sub(r"[^a-zA-Z0-9_-]", "_", name) or "tool"
            candidate = clean[:64]
            if candidate in taken or len(clean) > 64:
                candidate = f"{clean[:55]}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"
            taken.add(candidate)
            self.to_openai[name] = candidate
        self.to_mcp = {v: k for k, v in self.to_openai.items()}

    def mcp(self, name: str) -> str:
        """The server's name for `name` (an OpenAI name or the server's own)."""
        return name if name in self.to_openai else self.to_mcp.get(name, name)
