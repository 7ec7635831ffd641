"""The embedded engine's OpenAI rendering: a finished (or streaming) sequence as a chat.completion body.

Text is decoded with special tokens kept and cut at a stop string; tool calls and reasoning are parsed
by the model family's tool parser; logprobs and usage follow OpenAI's shapes, plus ``token_ids`` (and
``prompt_token_ids``) so that a trajectory keeps the exact sampled tokens.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from ..base import ChatRequest
from .scheduler import Seq

__all__ = ["Renderer"]

logger = logging.getLogger(__name__)


class Renderer:
    """Builds OpenAI response bodies from sequences, with the model's tokenizer and tool parser."""

    def __init__(self, tokenizer: Any, parser: Any, eos_ids: set[int], stats: dict[str, int]) -> None:
        self.tokenizer = tokenizer
        self.parser = parser
        self.eos_ids = eos_ids
        self.stats = stats

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def text(self, seq: Seq) -> str:
        ids = seq.tokens[:-1] if seq.tokens and seq.tokens[-1] in self.eos_ids else seq.tokens
        text = self.decode(ids)
        return text[: seq.stop_text_at] if seq.stop_text_at is not None else text

    def message(self, seq: Seq, request: ChatRequest) -> dict[str, Any]:
        text = self.text(seq)
        parsed = self.parser(text)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if parsed.reasoning is not None or getattr(self.parser, "markup", False):
            message["content"] = parsed.content  # harmony: content is the final channel, markup stripped
            if parsed.reasoning is not None:
                message["reasoning_content"] = parsed.reasoning
        if request.tools and request.tool_choice != "none":
            if parsed.error is not None:  # kept as content; counted, never raised
                self.stats["tool_parse_errors"] = self.stats.get("tool_parse_errors", 0) + 1
                seq.parse_error = parsed.error
                logger.info("tool call kept as text: %s", parsed.error)
            if parsed.tool_calls:
                if seq.finish_reason == "stop":
                    seq.finish_reason = "tool_calls"
                message.update(content=parsed.content, tool_calls=parsed.tool_calls)
        return message

    def token_str(self, tid: int, request: ChatRequest) -> str:
        return f"token_id:{tid}" if request.tokens_as_ids else self.tokenizer.decode([tid], skip_special_tokens=False)

    def logprobs(self, seq: Seq, start: int, end: int, request: ChatRequest) -> dict[str, Any]:
        content = []
        for i in range(start, end):
            token = self.token_str(seq.tokens[i], request)
            entry: dict[str, Any] = {"token": token, "logprob": seq.logprobs[i],
                                     "bytes": list(token.encode("utf-8")), "top_logprobs": []}
            if seq.top:
                entry["top_logprobs"] = [
                    {"token": (t := self.token_str(k, request)), "logprob": v, "bytes": list(t.encode("utf-8"))}
                    for k, v in seq.top[i]
                ]
            content.append(entry)
        return {"content": content}

    def usage(self, prompt: list[int], seqs: list[Seq]) -> dict[str, Any]:
        completion = sum(len(s.tokens) for s in seqs)
        return {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion,
                "prompt_tokens_details": {"cached_tokens": max((s.cached for s in seqs), default=0)}}

    def response(self, request: ChatRequest, prompt: list[int], seqs: list[Seq]) -> dict[str, Any]:
        choices = []
        for seq in seqs:
            message = self.message(seq, request)
            choices.append({
                "index": seq.index,
                "message": message,
                "finish_reason": seq.finish_reason,
                "logprobs": self.logprobs(seq, 0, len(seq.tokens), request),
                "token_ids": list(seq.tokens),
                **({"tool_parse_error": seq.parse_error} if seq.parse_error else {}),
            })
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": choices,
            "usage": self.usage(prompt, seqs),
            "prompt_token_ids": prompt,
        }
