"""OpenAI `response_format` for the embedded engine: JSON by constrained decoding with xgrammar.

The format becomes a JSON Schema, the schema a grammar (compiled once per distinct schema text:
xgrammar's compiler keeps the cache), and each choice gets its own matcher. Every decode step the
engine masks the logits of rows with a matcher to the tokens the grammar allows, samples, and feeds
the chosen token back; a matcher that has accepted a stop token ends its sequence.

Strings bounded by minLength/maxLength are compiled as the equivalent `pattern`: xgrammar 0.2.9 turns
the bounds into a character class that admits raw control characters (a tab inside a string, which
strict JSON parsers refuse; xgrammar issue #800), where its pattern path keeps to JSON.

The JSON comes out on one line (", " and ": " separators, no free whitespace): with any whitespace
allowed, small models run to max_tokens on newlines and spaces. vLLM allows any whitespace by default
(its --structured-outputs-config disable_any_whitespace turns that off). xgrammar is imported on the
first request that asks for a format.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import torch

from .base import EngineError

__all__ = ["Grammars", "mask_logits", "schema_for"]

_SHAPES = (
    '{"type": "json_schema", "json_schema": {"name": ..., "schema": {JSON Schema}}}, {"type": "json_object"} '
    'or {"type": "text"}'
)

_ANY_OBJECT = '{"type": "object"}'  # what json_object asks for


def _bad(message: str) -> EngineError:
    return EngineError(
        f"{message}; the embedded engine supports response_format {_SHAPES}",
        status=400,
        type="invalid_request_error",
    )


def schema_for(response_format: dict[str, Any] | None) -> str | None:
    """The JSON Schema text `response_format` asks for; None for plain text. A 400 `EngineError` otherwise."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise _bad(f"response_format is a {type(response_format).__name__}, not an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return _ANY_OBJECT
    if kind != "json_schema":
        raise _bad(f"response_format.type {kind!r} is not supported")
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise _bad("response_format.json_schema.schema is missing or not an object")
    return json.dumps(_bounded_strings_as_patterns(schema))


_BOUNDED = "^[^\\x00-\\x1f]{%d,%s}$"  # any characters but the control ones, min to max of them
_STRING_RULES = {"pattern", "format", "enum", "const"}


def _bounded_strings_as_patterns(node: Any) -> Any:
    """`node` with every {"type": "string", "minLength"/"maxLength"} schema in it written as a pattern."""
    if isinstance(node, list):
        return [_bounded_strings_as_patterns(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _bounded_strings_as_patterns(v) for k, v in node.items()}
    low, high = out.get("minLength", 0), out.get("maxLength")
    if (
        out.get("type") == "string"
        and ("minLength" in out or "maxLength" in out)
        and not _STRING_RULES & out.keys()
        and all(isinstance(b, int) and b >= 0 for b in (low, 0 if high is None else high))
    ):
        out.pop("minLength", None)
        out.pop("maxLength", None)
        out["pattern"] = _BOUNDED % (low, "" if high is None else high)
    return out


def _xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError as exc:
        raise EngineError(
            "response_format needs the xgrammar package on the server: pip install xgrammar "
            "(or pip install 'art-rl[structured]'), then restart it",
            status=501,
            type="server_error",
        ) from exc
    return xgrammar


class Grammars:
    """Compiles `response_format` schemas for one tokenizer and hands out one matcher per choice.

    Example:
        grammars = Grammars(tokenizer, vocab_size=49152, stop_ids=[2])
        matchers = grammars.matchers(schema_for({"type": "json_object"}), n=2)
    """

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> None:
        self.tokenizer, self.vocab_size, self.stop_ids = tokenizer, vocab_size, stop_ids
        self._compiler: Any = None
        self._lock = threading.Lock()

    def matchers(self, schema: str, n: int) -> list[Any]:
        """`n` fresh matchers for `schema` (compiled on first sight; seconds for a large vocabulary)."""
        xgr = _xgrammar()
        with self._lock:
            if self._compiler is None:
                info = xgr.TokenizerInfo.from_huggingface(
                    self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_ids
                )
                self._compiler = xgr.GrammarCompiler(info, cache_limit_bytes=64 << 20)
        strict = schema != _ANY_OBJECT  # strict: no properties beyond the schema's; json_object takes any
        try:
            compiled = self._compiler.compile_json_schema(schema, any_whitespace=False, strict_mode=strict)
        except (RuntimeError, ValueError) as exc:  # xgrammar's message starts "[time] path/file.cc:line: "
            reason = re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", str(exc)).strip()
            raise _bad(f"response_format.json_schema.schema could not be compiled: {reason}") from exc
        return [xgr.GrammarMatcher(compiled) for _ in range(n)]


def mask_logits(logits: torch.Tensor, matchers: list[Any]) -> torch.Tensor:
    """A copy of `logits` [B, V] with -inf wherever row i's matcher forbids the token (None: row untouched)."""
    xgr = _xgrammar()
    rows = [i for i, m in enumerate(matchers) if m is not None]
    # [B, ceil(V / 32)] int32, every token allowed until a matcher fills its row
    bitmask = xgr.allocate_token_bitmask(len(matchers), logits.shape[-1])
    for i in rows:
        matchers[i].fill_next_token_bitmask(bitmask, i)
    masked = logits.contiguous().clone()
    xgr.apply_token_bitmask_inplace(masked, bitmask.to(masked.device), indices=rows)
    return masked
