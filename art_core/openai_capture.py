"""An httpx transport that records every chat completion into the current trajectory.

`Model.openai_client()` installs it, so a rollout that uses that client needs no extra code:
inside `capture()` (or a plugin's rollout decorator) each request and reply lands in the
trajectory, with token ids and logprobs when the model is the trainable one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx

from . import tracing
from .capture import capture, current_trajectory, record_completion, sample_from_choice

logger = logging.getLogger(__name__)


def _record(body: dict[str, Any], data: dict[str, Any], trainable: bool) -> None:
    tracing.note_response(body, data)
    for choice in data.get("choices") or []:
        message = dict(choice.get("message") or {})
        if "art_step" in data and "art_step" not in choice:
            choice = {**choice, "art_step": data["art_step"]}
        sample = sample_from_choice(choice, model=body.get("model")) if trainable else None
        record_completion(body.get("messages") or [], message, tools=body.get("tools"), sample=sample)


def merge_stream_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold streamed chat completion chunks into one non-streamed response body."""
    choices: dict[int, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for chunk in chunks:
        for key in ("id", "model", "art_step"):
            if key in chunk:
                top[key] = chunk[key]
        for c in chunk.get("choices") or []:
            acc = choices.setdefault(
                c.get("index", 0), {"message": {"role": "assistant", "content": ""}, "tool_calls": {}, "lp": [], "ids": []}
            )
            delta = c.get("delta") or {}
            acc["message"]["content"] += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = acc["tool_calls"].setdefault(
                    tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            acc["lp"] += ((c.get("logprobs") or {}).get("content")) or []
            acc["ids"] += c.get("token_ids") or []
            if c.get("finish_reason"):
                acc["finish_reason"] = c["finish_reason"]
    out = []
    for index, acc in sorted(choices.items()):
        message = acc["message"]
        if acc["tool_calls"]:
            message["tool_calls"] = [acc["tool_calls"][k] for k in sorted(acc["tool_calls"])]
        choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": acc.get("finish_reason")}
        if acc["lp"]:
            choice["logprobs"] = {"content": acc["lp"]}
        if acc["ids"]:
            choice["token_ids"] = acc["ids"]
        out.append(choice)
    return {**top, "choices": out}


class _RecordingStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, body: dict[str, Any], trajectory: Any, trainable: bool) -> None:
        self.inner, self.body, self.trajectory, self.trainable = inner, body, trajectory, trainable
        self.buffer = bytearray()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self.inner:
            self.buffer += part
            yield part

    async def aclose(self) -> None:
        await self.inner.aclose()
        chunks = []
        for line in self.buffer.decode("utf-8", "replace").splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    chunks.append(json.loads(line[5:]))
                except ValueError:
                    logger.warning("could not parse a streamed chunk; the turn is not captured")
                    return
        with capture(self.trajectory):  # the stream may close outside the rollout's context
            _record(self.body, merge_stream_chunks(chunks), self.trainable)


class CapturingTransport(httpx.AsyncBaseTransport):
    """Forward requests; record chat completions made inside a rollout."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None, *, trainable: bool = True) -> None:
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.trainable = trainable

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        trajectory = current_trajectory()
        if trajectory is not None:
            tracing.call_started()
            # ART's server keeps a trajectory's turns on the engine replica that holds its prefix
            request.headers["X-ART-Trajectory"] = trajectory.id
        response = await self.inner.handle_async_request(request)
        if (
            trajectory is None
            or request.method != "POST"
            or not request.url.path.endswith("/chat/completions")
            or response.status_code != 200
        ):
            return response
        try:
            body = json.loads(request.content or b"{}")
        except ValueError:
            return response
        headers = [(k, v) for k, v in response.headers.items() if k.lower() not in ("content-encoding", "content-length")]
        if body.get("stream"):
            stream = _RecordingStream(response.stream, body, trajectory, self.trainable)  # type: ignore[arg-type]
            return httpx.Response(response.status_code, headers=headers, stream=stream, request=request)
        content = await response.aread()
        try:
            _record(body, json.loads(content), self.trainable)
        except Exception:  # capture must never break the user's call
            logger.exception("could not record a chat completion into the trajectory")
        return httpx.Response(response.status_code, headers=headers, content=content, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()
