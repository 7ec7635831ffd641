"""Tool-call arguments sampled from a tool's JSON Schema, with no dataset and no LLM.

Where a value comes from, in order of preference for each property:

1. the schema's own `const`, `enum`, `examples` and `default`;
2. values seen in earlier tool results under a matching key (`ValuePool`): a `note_id` argument
   takes ids the server handed out before, so a call can refer to something that exists;
3. hints in the tool's description, for a string the schema says nothing more about: a format
   written as a placeholder (``HH:MM``, ``YYYY-MM-DD``) filled with a random value, quoted examples
   (``"(3 + 4) * 2"`` with fresh numbers, ``'Europe/London'``) and parenthesised word lists
   (``(m km cm mm)``);
4. the type's own range: `minimum`/`maximum` (exclusive too) and `multipleOf` for numbers,
   `minLength`/`maxLength` and `format` (date, date-time, email, uri, uuid...) for strings,
   `minItems`/`maxItems` for arrays, `required` and optional properties for objects.

`$ref` into the schema's `$defs`, `anyOf`/`oneOf` (a non-null branch) and a list of types are
followed. Sampling is seeded: the same `random.Random` state gives the same arguments.
"""

from __future__ import annotations

import json
import math
import random
import re
import string
from dataclasses import dataclass, field
from typing import Any

WORDS = (
    "alpha amber apple atlas basil birch cedar cobalt coral delta ember fern garnet harbor indigo "
    "jasper juniper lemon maple meadow nova olive onyx orbit pearl pine quartz raven river saffron "
    "sierra slate spruce tango topaz umber velvet willow zephyr"
).split()
NOUNS = "report meeting budget invoice draft plan recipe ticket order note".split()
MAX_DEPTH = 6  # nested objects and arrays deeper than this get their smallest value
_QUOTED = re.compile(r"[\"“]([^\"”]{1,80})[\"”]")
_SINGLE_QUOTED = re.compile(r"(?<![A-Za-z0-9])'([^'\n]{1,80})'(?![A-Za-z0-9])")  # not an apostrophe
_TOKEN = r"(?:YYYY|YY|MM|DD|HH|hh|mm|SS|ss)"
_PLACEHOLDER = re.compile(rf"(?<![A-Za-z]){_TOKEN}(?:[-:/. T]{_TOKEN})+(?![A-Za-z])")
_PAREN_LIST = re.compile(r"\(([A-Za-z0-9_\- ]+)\)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class SchemaError(ValueError):
    """A schema cannot be sampled (a `$ref` that points nowhere, a type this module does not know)."""


@dataclass
class ValuePool:
    """Scalar values seen in earlier tool results, by the key they appeared under.

    Example:
        pool = ValuePool()
        pool.add({"id": 3, "title": "groceries"})
        pool.matching("note_id")   # [3]: "note_id" ends in "id"
    """

    values: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, result: Any, key: str = "") -> None:
        """Collect every scalar of a (JSON-like) result under the key it was found at."""
        if isinstance(result, dict):
            for k, v in result.items():
                self.add(v, str(k))
        elif isinstance(result, list):
            for v in result[:50]:
                self.add(v, key)
        elif key and isinstance(result, (str, int, float)) and not isinstance(result, bool):
            seen = self.values.setdefault(key.lower(), [])
            if result not in seen and len(seen) < 200:
                seen.append(result)

    def strings(self) -> list[str]:
        """Every short string seen, whatever its key."""
        return sorted({v for vs in self.values.values() for v in vs if isinstance(v, str) and len(v) <= 40})

    def matching(self, name: str) -> list[Any]:
        """Values under `name`, or under its last word (``note_id`` -> ``id``, ``noteId`` -> ``id``)."""
        name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
        if name in self.values:
            return list(self.values[name])
        tail = re.split(r"[_\-\s]", name)[-1]
        return list(self.values.get(tail, [])) if tail != name else []


def description_hints(description: str | None) -> list[str]:
    """String candidates a tool or property description offers: quoted examples and (word lists)."""
    if not description:
        return []
    quoted = _QUOTED.findall(description) + _SINGLE_QUOTED.findall(description)
    hints = [q.strip() for q in quoted if q.strip()]
    for group in _PAREN_LIST.findall(description):
        words = group.split()
        if len(words) >= 2:  # "(m km cm)" is a list; "(optional)" is not
            hints += words
    return hints


def fill_placeholder(placeholder: str, rng: random.Random) -> str:
    """A random value in a written format: ``HH:MM`` -> ``07:42``, ``YYYY-MM-DD`` -> ``2024-03-18``."""
    out, previous = [], ""
    for part in re.split(rf"({_TOKEN})", placeholder):
        if part in ("HH", "hh"):
            part = f"{rng.randint(0, 23) if part == 'HH' else rng.randint(1, 12):02d}"
            previous = "hour"
        elif part in ("mm", "SS", "ss") or (part == "MM" and previous == "hour"):
            part = f"{rng.randint(0, 59):02d}"
        elif part:
            part = {"YYYY": str(rng.randint(2020, 2026)), "YY": f"{rng.randint(20, 26)}",
                    "MM": f"{rng.randint(1, 12):02d}", "DD": f"{rng.randint(1, 28):02d}"}.get(part, part)  # fmt: skip
        out.append(part)
    return "".join(out)


def _fresh_numbers(text: str, rng: random.Random) -> str:
    """`text` with each number replaced by a new one of the same size (an example made a new case)."""

    def repl(m: re.Match[str]) -> str:
        digits = len(m.group().split(".")[0])
        low = 10 ** (digits - 1) if digits > 1 else 1
        return str(rng.randint(low, 10**digits - 1))

    return _NUMBER.sub(repl, text)


class Sampler:
    """Samples arguments for one tool's input schema.

    Example:
        sampler = Sampler(tool_schema, description=tool.description, rng=random.Random(0))
        arguments = sampler.arguments(pool)
    """

    def __init__(self, schema: dict[str, Any], *, description: str | None = None,
                 rng: random.Random | None = None, optional_p: float = 0.5) -> None:  # fmt: skip
        self.schema = schema or {"type": "object", "properties": {}}
        self.defs = {**self.schema.get("definitions", {}), **self.schema.get("$defs", {})}
        self.hints = description_hints(description)
        self.rng = rng or random.Random(0)
        self.optional_p = optional_p

    def arguments(self, pool: ValuePool | None = None) -> dict[str, Any]:
        """One argument object for the tool."""
        value = self.value(self.schema, "", pool or ValuePool(), 0)
        if not isinstance(value, dict):
            raise SchemaError(
                f"the tool's input schema is not an object schema: {json.dumps(self.schema)[:200]}"
            )
        return value

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while "$ref" in schema:
            ref = schema["$ref"]
            name = ref.rsplit("/", 1)[-1]
            if not ref.startswith("#/") or name not in self.defs or seen > 20:
                raise SchemaError(
                    f"cannot follow $ref {ref!r}; only local '#/$defs/...' references are followed"
                )
            schema = {**self.defs[name], **{k: v for k, v in schema.items() if k != "$ref"}}
            seen += 1
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = [b for b in schema[key] if self._resolve(b).get("type") != "null"] or schema[key]
                rest = {k: v for k, v in schema.items() if k != key}
                return {**self._resolve(self.rng.choice(branches)), **rest}
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                part = self._resolve(part)
                merged["properties"] = {**merged.get("properties", {}), **part.get("properties", {})}
                merged["required"] = [*merged.get("required", []), *part.get("required", [])]
                merged.update({k: v for k, v in part.items() if k not in ("properties", "required")})
            return merged
        return schema

    def value(self, schema: dict[str, Any], name: str, pool: ValuePool, depth: int) -> Any:
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self.rng.choice(schema["enum"])
        kind = self._type(schema)
        given = [
            *schema.get("examples", []),
            *([schema["default"]] if schema.get("default") is not None else []),
        ]
        seen = [v for v in pool.matching(name) if _fits(v, kind)] if name else []
        if seen and self.rng.random() < 0.8:
            return self.rng.choice(seen)
        if (
            kind == "string"
            and not schema.get("format")
            and self.rng.random() < 0.3
            and (anything := pool.strings())
        ):
            return self.rng.choice(anything)  # a value from an earlier result: a search that finds something
        if given and self.rng.random() < 0.5:
            return self.rng.choice(given)
        if kind == "object":
            return self._object(schema, pool, depth)
        if kind == "array":
            return self._array(schema, name, pool, depth)
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        if kind == "string":
            return self._string(schema, name)
        raise SchemaError(f"cannot sample a value of type {kind!r} for {name or 'the arguments'}")

    def _type(self, schema: dict[str, Any]) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:  # untyped: guess from what the schema constrains
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        return kind

    def _object(self, schema: dict[str, Any], pool: ValuePool, depth: int) -> dict[str, Any]:
        required = set(schema.get("required", []))
        out: dict[str, Any] = {}
        for key, sub in schema.get("properties", {}).items():
            if key in required or (depth < MAX_DEPTH and self.rng.random() < self.optional_p):
                out[key] = self.value(sub, key, pool, depth + 1)
        return out

    def _array(self, schema: dict[str, Any], name: str, pool: ValuePool, depth: int) -> list[Any]:
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", max(low, 3)))
        n = low if depth >= MAX_DEPTH else self.rng.randint(low, max(low, min(high, low + 3)))
        items = schema.get("items", {"type": "string"})
        out: list[Any] = []
        for _ in range(n * 5):  # uniqueItems: a few tries per item
            if len(out) == n:
                break
            v = self.value(items, name.rstrip("s") if name else name, pool, depth + 1)
            if not (schema.get("uniqueItems") and v in out):
                out.append(v)
        return out

    def _integer(self, schema: dict[str, Any]) -> int:
        low = schema.get(
            "minimum", schema.get("exclusiveMinimum", -1) + 1 if "exclusiveMinimum" in schema else 0
        )
        high = schema.get(
            "maximum", schema.get("exclusiveMaximum", 1) - 1 if "exclusiveMaximum" in schema else None
        )
        low = int(low)
        high = int(high) if high is not None else max(low + 100, low)
        step = int(schema.get("multipleOf", 1)) or 1
        first = -(-low // step) * step
        if first > high:
            raise SchemaError(f"no integer between {low} and {high} is a multiple of {step}")
        return first + step * self.rng.randint(0, (high - first) // step)

    def _number(self, schema: dict[str, Any]) -> float:
        low = float(schema.get("minimum", schema.get("exclusiveMinimum", 0)))
        high = float(schema.get("maximum", schema.get("exclusiveMaximum", low + 100)))
        if "multipleOf" in schema:
            step = float(schema["multipleOf"])
            first, last = math.ceil(low / step), math.floor(high / step)
            if first > last:
                raise SchemaError(f"no number between {low} and {high} is a multiple of {step}")
            return round(step * self.rng.randint(first, last), 10)
        value = round(self.rng.uniform(low, high), 1)
        if schema.get("exclusiveMinimum") is not None and value <= low:
            value = low + (high - low) / 2
        if schema.get("exclusiveMaximum") is not None and value >= high:
            value = low + (high - low) / 2
        return value

    def _string(self, schema: dict[str, Any], name: str) -> str:
        fmt = schema.get("format")
        if fmt:
            return self._formatted(fmt)
        if placeholders := _PLACEHOLDER.findall(schema.get("description") or ""):
            return fill_placeholder(self.rng.choice(placeholders), self.rng)
        hints = description_hints(schema.get("description")) or self.hints
        if hints and self.rng.random() < 0.9:
            return _fresh_numbers(self.rng.choice(hints), self.rng)
        low = int(schema.get("minLength", 1))
        high = int(schema.get("maxLength", max(low, 40)))
        words = [self.rng.choice(WORDS)]
        if self.rng.random() < 0.5:
            words.append(self.rng.choice(NOUNS))
        text = " ".join(words)
        while len(text) < low:
            text += " " + self.rng.choice(WORDS)
        return text[:high]

    def _formatted(self, fmt: str) -> str:
        r = self.rng
        day = f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
        clock = f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00"
        word = r.choice(WORDS)
        by_format = {
            "date": day,
            "date-time": f"{day}T{clock}Z",
            "time": clock,
            "email": f"{word}@example.com",
            "idn-email": f"{word}@example.com",
            "uri": f"https://example.com/{word}",
            "url": f"https://example.com/{word}",
            "hostname": f"{word}.example.com",
            "ipv4": f"192.0.2.{r.randint(1, 254)}",
            "ipv6": f"2001:db8::{r.randint(1, 9999):x}",
            "uuid": "-".join(
                "".join(r.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)
            ),
        }
        return by_format.get(fmt, "".join(r.choice(string.ascii_lowercase) for _ in range(8)))


def _fits(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return False


def sample_arguments(schema: dict[str, Any], *, description: str | None = None, rng: random.Random | None = None,
                     pool: ValuePool | None = None) -> dict[str, Any]:  # fmt: skip
    """One argument object for a tool's input schema (see the module docstring for where values come from).

    Example:
        sample_arguments({"type": "object", "properties": {"unit": {"enum": ["m", "km"]}},
                          "required": ["unit"]}, rng=random.Random(0))   # {"unit": "km"}
    """
    return Sampler(schema, description=description, rng=rng).arguments(pool)


__all__ = ["SchemaError", "Sampler", "ValuePool", "description_hints", "fill_placeholder", "sample_arguments"]
