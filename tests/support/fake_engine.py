"""An `Engine` that answers with a Python function: service and HTTP tests without torch or a model.

It speaks the engine protocol of `art_train.engines.base` (chat, streaming, adapters, the
weight-sync probe) and records what it was asked. Token ids are one per whitespace-separated
piece of the reply (`fake_token_ids`), each with logprob -1.0.

Example:
    engine = FunctionEngine(lambda messages: "hello " + messages[-1]["content"])
    service = ModelService(make_engine=lambda model: engine)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from art_train.engines.base import ChatRequest, EngineError

from .scripted_openai import fake_token_ids

__all__ = ["FunctionEngine"]

Reply = Callable[[list[dict[str, Any]]], str]


class FunctionEngine:
    """Replies with `reply(messages)` (`delay` seconds later); adapters are names it remembers."""

    sync_tolerance: float | None = None
    sync_reference_dtype: str | None = None

    def __init__(self, reply: Reply, *, delay: float = 0.0) -> None:
        self.reply = reply
        self.delay = delay
        self.adapters: dict[str, Path] = {}
        self.requests: list[ChatRequest] = []
        self.started = self.stopped = False
        self.in_flight = 0

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def load_adapter(self, name: str, path: Path) -> None:
        self.adapters[name] = Path(path)

    async def unload_adapter(self, name: str) -> None:
        self.adapters.pop(name, None)

    async def adapter_fingerprint(self, name: str) -> str | None:
        return None  # it holds no weights: the weight-sync check relies on the probe

    async def sequences_logprobs(self, sequences: list[list[int]], adapter: str | None) -> list[list[float]]:
        return [await self.sequence_logprobs(ids, adapter) for ids in sequences]

    async def sequence_logprobs(self, token_ids: list[int], adapter: str | None) -> list[float]:
        return [-1.0] * max(len(token_ids) - 1, 0)

    def _check(self, request: ChatRequest) -> str:
        if request.adapter is not None and request.adapter not in self.adapters:
            raise EngineError(f"adapter {request.adapter!r} is not loaded", status=404, type="not_found_error")
        self.requests.append(request)
        return self.reply(request.messages)

    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        text = self._check(request)
        self.in_flight += 1
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        ids = fake_token_ids(text)
        choices = [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                    "token_ids": ids, "logprobs": {"content": [
                        {"token": f"token_id:{t}", "logprob": -1.0, "bytes": [], "top_logprobs": []} for t in ids]}}
                   for i in range(request.sampling.n)]
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": request.model, "choices": choices,
                "usage": {"prompt_tokens": 1, "completion_tokens": len(ids) * request.sampling.n,
                          "total_tokens": 1 + len(ids) * request.sampling.n}}

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        text = self._check(request)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": request.model}
        yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        pieces = text.split(" ")
        for i, piece in enumerate(pieces):
            await asyncio.sleep(self.delay / max(len(pieces), 1))
            last = i == len(pieces) - 1
            yield {**head, "choices": [{"index": 0, "delta": {"content": piece + ("" if last else " ")},
                                        "finish_reason": "stop" if last else None}]}
        yield {**head, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": len(pieces),
                                                "total_tokens": 1 + len(pieces)}}
