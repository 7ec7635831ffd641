"""A real OpenAI-compatible HTTP server on loopback that answers from a script.

It stands in for what cannot be reached here (paid judge and generator APIs) and for replies a
tiny model won't produce (reliable tool calls). It speaks the real protocol over HTTP, so the
clients under test (openai, litellm, langchain-openai) do their real work.

Example:
    with ScriptedOpenAI(lambda body: {"content": "hello"}) as server:
        client = openai.OpenAI(base_url=server.url, api_key="x")
        ...
        assert server.requests[0]["messages"][-1]["content"] == "hi"

A handler gets the request body (a dict) and returns a reply dict:
    {"content": str, "tool_calls": [...], "finish_reason": str, "usage": {...}}   a completion
    {"status": 500, "error": "boom"}                                               an error
    {"delay": 2.0, ...}                                                            sleep first
    {"raw": {...}}                                                                 this exact JSON body
A list of replies (or handlers) is played in order; the last one repeats.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any]
Handler = Callable[[dict[str, Any]], Reply]


def fake_token_ids(text: str) -> list[int]:
    """Stable pretend token ids: one per whitespace-separated piece (at least one)."""
    pieces = text.split() or [""]
    return [zlib.crc32(p.encode()) % 49000 + 100 for p in pieces]


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: 100 clients connecting at once on a busy machine
    # overflowed it and some connections failed
    request_queue_size = 512


class ScriptedOpenAI:
    def __init__(self, script: Handler | Reply | list[Reply | Handler], *, model: str = "scripted") -> None:
        self.script = script
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._played = 0
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the server first (use it as a context manager)"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            script = self.script
            if isinstance(script, list):
                item = script[min(self._played, len(script) - 1)]
                self._played += 1
            else:
                item = script
        return item(body) if callable(item) else dict(item)

    def __enter__(self) -> ScriptedOpenAI:
        outer = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model", "owned_by": "test"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                try:
                    reply = outer._next(body)
                except Exception as exc:  # a broken script is the test's bug: say so loudly
                    self._send(500, {"error": {"message": f"script failed: {exc!r}", "type": "script_error"}})
                    return
                if reply.get("delay"):
                    time.sleep(float(reply["delay"]))
                if "status" in reply:
                    message = reply.get("error", "scripted error")
                    self._send(int(reply["status"]), {"error": {"message": message, "type": "scripted", "code": reply["status"]}})
                    return
                payload = reply["raw"] if "raw" in reply else completion(body, reply, outer.model)
                if body.get("stream") and "raw" not in reply:
                    self._stream(payload)
                else:
                    self._send(200, payload)

            def _stream(self, payload: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in stream_chunks(payload):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._server = _Server(("127.0.0.1", 0), RequestHandler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def completion(body: dict[str, Any], reply: Reply, model: str) -> dict[str, Any]:
    content = reply.get("content")
    tool_calls = reply.get("tool_calls")
    if tool_calls:
        tool_calls = [
            {
                "id": c.get("id") or f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {
                    "name": c["function"]["name"] if "function" in c else c["name"],
                    "arguments": _arguments(c),
                },
            }
            for c in tool_calls
        ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = reply.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    text = (content or "") + "".join(c["function"]["arguments"] for c in tool_calls or [])
    if body.get("logprobs"):
        ids = fake_token_ids(text)
        as_ids = body.get("return_tokens_as_token_ids")
        choice["logprobs"] = {
            "content": [
                {"token": f"token_id:{t}" if as_ids else str(t), "logprob": -0.05 * (i % 7 + 1), "bytes": None, "top_logprobs": []}
                for i, t in enumerate(ids)
            ]
        }
        choice["token_ids"] = ids
    prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in body.get("messages") or [])
    completion_tokens = len(text.split())
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or model,
        "choices": [choice],
        "usage": reply.get("usage")
        or {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    }


def _arguments(call: dict[str, Any]) -> str:
    args = call["function"].get("arguments") if "function" in call else call.get("arguments", {})
    return args if isinstance(args, str) else json.dumps(args)


def stream_chunks(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Split a completion into OpenAI-style stream chunks (content word by word)."""
    choice = payload["choices"][0]
    message = choice["message"]
    base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"], "model": payload["model"]}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    words = (message.get("content") or "").split(" ")
    lps = ((choice.get("logprobs") or {}).get("content")) or []
    ids = choice.get("token_ids") or []
    for i, word in enumerate(words if message.get("content") else []):
        piece = word if i == 0 else " " + word
        c: dict[str, Any] = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
        if lps and i < len(lps):
            c["logprobs"] = {"content": [lps[i]]}
            c["token_ids"] = [ids[i]]
        chunks.append({**base, "choices": [c]})
    for j, call in enumerate(message.get("tool_calls") or []):
        delta = {"tool_calls": [{"index": j, "id": call["id"], "type": "function", "function": call["function"]}]}
        chunks.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}], "usage": payload["usage"]})
    return chunks
