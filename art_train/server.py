"""The HTTP surface: OpenAI-compatible `/v1` plus ART's training API (see docs/http-api.md).

`create_app(service)` is used by `art serve` and, in-process, by `LocalBackend`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from art_core import Model, Registration, SFTConfig, TrainableModel, TrainConfig, Trajectory, TrajectoryGroup
from art_core.backend import DEFAULT_BEST_METRIC

from .engines.base import ChatRequest, EngineError, SamplingParams
from .prometheus import install_metrics
from .sample_store import SampleStore, StreamRecorder
from .service import ModelService, ServiceError

__all__ = ["ChatCompletionBody", "create_app"]

logger = logging.getLogger(__name__)


class ChatCompletionBody(BaseModel):
    """The fields of an OpenAI chat completion request that ART serves; others are accepted and ignored.

    As strict as OpenAI's API: no type coercion (``"true"`` is not a boolean), and each message's
    required fields are required (`_check_message`); every refusal is a 400 naming the field.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=64)
    stream: bool = False
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    return_tokens_as_token_ids: bool = False
    ignore_eos: bool = False
    response_format: dict[str, Any] | None = None  # json_schema, json_object or text (docs/serving.md)

    def to_request(self) -> ChatRequest:
        for i, m in enumerate(self.messages):
            _check_message(i, m)
        for i, tool in enumerate(self.tools or ()):
            _check_tool(i, tool)
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        sampling = SamplingParams(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            max_tokens=self.max_completion_tokens or self.max_tokens,
            stop=stop,
            seed=self.seed,
            n=self.n,
            top_logprobs=self.top_logprobs or 0,
            ignore_eos=self.ignore_eos,
        )
        tools = self.tools if self.tools and self.tool_choice != "none" else None
        return ChatRequest(messages=self.messages, model=self.model, tools=tools, tool_choice=self.tool_choice,
                           sampling=sampling, stream=self.stream, tokens_as_ids=self.return_tokens_as_token_ids,
                           response_format=self.response_format, extra=self.model_extra or {})


def _check_message(i: int, m: dict[str, Any]) -> None:
    """A 400 naming the field, for what OpenAI refuses in a message."""
    at = f"messages[{i}]"
    role = m.get("role")
    if role not in {"system", "developer", "user", "assistant", "tool"}:
        raise ServiceError(f"{at} has role {role!r}; use system, user, assistant or tool")
    content = m.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise ServiceError(f"{at}.content is a {type(content).__name__}; send a string or a list of content parts")
    if "name" in m and not isinstance(m["name"], str):
        raise ServiceError(f"{at}.name is a {type(m['name']).__name__}; it must be a string")
    if role == "assistant":
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise ServiceError(f"{at}.tool_calls is a {type(calls).__name__}; send a list of tool calls")
        if content is None and not calls:
            raise ServiceError(f"{at} (assistant) has neither content nor tool_calls; send content or tool_calls")
        for k, call in enumerate(calls or ()):
            _check_call(f"{at}.tool_calls[{k}]", call)
    elif content is None:
        raise ServiceError(f"{at}.content is required for a {role} message")
    if role == "tool" and not isinstance(m.get("tool_call_id"), str):
        problem = "is required" if m.get("tool_call_id") is None else "must be a string"
        raise ServiceError(f"{at}.tool_call_id {problem} for a tool message: the id of the tool call it answers")


def _check_call(at: str, call: Any) -> None:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or call.get("type", "function") != "function":
        raise ServiceError(f'{at} must be {{"id": ..., "type": "function", "function": {{"name": ..., '
                           '"arguments": "<JSON string>"}}')
    if not isinstance(call.get("id"), str):
        raise ServiceError(f"{at}.id is required (a string)")
    if not isinstance(function.get("name"), str):
        raise ServiceError(f"{at}.function.name is required (a string)")
    if not isinstance(function.get("arguments"), str):
        raise ServiceError(f"{at}.function.arguments must be a JSON string such as \"{{}}\", "
                           f"not a {type(function.get('arguments')).__name__}")


_TOOL_SHAPE = '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {JSON Schema}}}'


def _check_tool(i: int, tool: dict[str, Any]) -> None:
    function = tool.get("function")
    if tool.get("type", "function") != "function" or not isinstance(function, dict):
        raise ServiceError(f"tools[{i}] is not a function tool (it needs type 'function' and a 'function' object); "
                           f"each tool is {_TOOL_SHAPE}")
    if not isinstance(function.get("name"), str) or not function["name"]:
        raise ServiceError(f"tools[{i}].function has no 'name'; each tool is {_TOOL_SHAPE}")
    if "parameters" in function and not isinstance(function["parameters"], dict):
        raise ServiceError(f"tools[{i}].function.parameters is a {type(function['parameters']).__name__}; it must be a "
                           'JSON Schema object such as {"type": "object", "properties": {...}}')


class _TrainBody(BaseModel):
    groups: list[TrajectoryGroup]
    config: TrainConfig = Field(default_factory=TrainConfig)
    step_id: str | None = Field(None, max_length=128)  # the same id on a retry: the step is not trained twice


class _SFTBody(BaseModel):
    trajectories: list[Trajectory]
    config: SFTConfig = Field(default_factory=SFTConfig)
    step_id: str | None = Field(None, max_length=128)


class _LogBody(BaseModel):
    groups: list[TrajectoryGroup]
    split: str = "val"
    step: int | None = None


class _SampleQuery(BaseModel):
    completion_id: str | None = None
    index: int = Field(0, ge=0)
    digest: str | None = None


class _DeleteBody(BaseModel):
    steps: list[int] | None = None
    best_checkpoint_metric: str | None = DEFAULT_BEST_METRIC


def _error(status: int, message: str, type: str, code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type, "code": code, "param": None}}, status_code=status)


TRAJECTORY_HEADER = "x-art-trajectory"  # the trajectory a chat completion belongs to (art_core's client sends it)

MAX_BODY_BYTES = 256 * 2**20  # a training call with many long trajectories is tens of MB; chat bodies are small


class _BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets a 413 before the app parses any of it.

    A declared Content-Length is checked at once; a chunked body is counted as it arrives.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._refuse(int(length), send)
        chunks, size = [], 0
        while True:  # read the body here (the app would buffer it anyway), counting as it comes
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._refuse(size, send, at_least=True)
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, size: int, send: Any, at_least: bool = False) -> None:
        mb = self.limit / 2**20
        message = (f"the request body is {'over ' if at_least else ''}{size} bytes, more than this server's limit of "
                   f"{self.limit} ({mb:g} MB); send fewer trajectory groups per call, or start `art serve` with a "
                   "larger --max-request-mb")
        response = _error(413, message, "invalid_request_error", "request_too_large")
        await response({"type": "http"}, _no_body, send)


async def _no_body() -> dict[str, Any]:
    return {"type": "http.disconnect"}


def create_app(service: ModelService, *, api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The FastAPI app for `service`; with `api_key`, every request needs ``Authorization: Bearer <key>``.

    Request bodies over `max_body_bytes` are refused with a 413.
    """
    app = FastAPI(title="ART", docs_url=None, redoc_url=None)
    app.state.service = service
    samples = app.state.samples = SampleStore()  # recent completions' token ids, for clients that dropped them
    app.add_middleware(_BodyLimit, limit=max_body_bytes)

    @app.middleware("http")
    async def check_key(request: Request, call_next: Any) -> Any:
        if api_key and request.url.path != "/health":
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            # compare_digest even when the scheme is wrong, so the time taken never depends on the key
            if not hmac.compare_digest(given.strip().encode(), api_key.encode()) or scheme.lower() != "bearer":
                return _error(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                              "authentication_error", "invalid_api_key")
        return await call_next(request)

    metrics = install_metrics(app, service)  # GET /metrics (Prometheus); counts every request, 401s too

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return _error(exc.status, str(exc), exc.type)

    @app.exception_handler(EngineError)
    async def engine_error(_: Request, exc: EngineError) -> JSONResponse:
        return _error(exc.status, str(exc), exc.type)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"{exc.detail}: {request.method} {request.url.path}; the routes are listed in docs/http-api.md"
        return _error(exc.status_code, message, "not_found_error" if exc.status_code == 404 else "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}" for e in exc.errors()]
        return _error(422, "invalid request body: " + "; ".join(parts), "invalid_request_error")

    async def _json(request: Request) -> Any:
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ServiceError(f"the request body is not valid JSON ({exc}); send one UTF-8 JSON object with "
                               "Content-Type: application/json") from exc

    def _parse(model: type[BaseModel], data: Any, status: int = 422) -> Any:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
            raise ServiceError("invalid request body: " + "; ".join(parts), status=status) from exc

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [{"id": name, "object": "model", "owned_by": "art", "created": 0} for name in service.served_names()]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body: ChatCompletionBody = _parse(ChatCompletionBody, await _json(request), status=400)  # as OpenAI
        chat_request = body.to_request()
        chat_request.session = request.headers.get(TRAJECTORY_HEADER)  # replicas keep a trajectory's turns together
        if not body.stream:  # a plain dict of JSON types: json.dumps it, skip FastAPI's 10x slower encoder
            answer = await service.chat(body.model, chat_request)
            samples.add_response(answer)
            if metrics is not None:
                metrics.completion(body.model, answer)
            return JSONResponse(answer)
        chunks = await service.chat_stream(body.model, chat_request)

        async def sse() -> AsyncIterator[bytes]:
            recorder = StreamRecorder(samples)
            try:
                async for chunk in chunks:
                    if metrics is not None:
                        metrics.stream_chunk(body.model, chunk)
                    recorder.chunk(chunk)
                    yield f"data: {json.dumps(chunk)}\n\n".encode()
                recorder.done()
            except (EngineError, ServiceError) as exc:
                err = {"error": {"message": str(exc), "type": exc.type}}
                yield f"data: {json.dumps(err)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    @app.post("/art/v1/samples")
    async def sample(request: Request) -> dict[str, Any]:
        """A recent completion's sampled ids and logprobs, by completion id or logprobs digest (sample_store.py)."""
        query: _SampleQuery = _parse(_SampleQuery, await _json(request))
        return {"sample": samples.get(query.completion_id, query.index, query.digest)}

    # -- training API --------------------------------------------------------------------------
    @app.post("/art/v1/models/register")
    async def register(request: Request) -> dict[str, Any]:
        data = await _json(request)
        kind = TrainableModel if isinstance(data, dict) and data.get("trainable") else Model
        model = _parse(kind, data)
        entry = await service.register(model)
        reg = Registration(base_url=str(request.base_url).rstrip("/") + "/v1", api_key=api_key or "art",
                           served_name=model.name, step=entry.step or 0)
        return reg.model_dump()

    @app.get("/art/v1/models/{name}/step")
    async def step(name: str) -> dict[str, int]:
        await service.restore(name)
        return {"step": await service.get_step(name)}

    def _stream_training(run: Any) -> StreamingResponse:
        async def lines() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

            def progress(event: dict[str, Any]) -> None:
                loop.call_soon_threadsafe(events.put_nowait, event)

            async def work() -> dict[str, Any]:
                try:
                    result = await run(progress)
                    return {"type": "result", "step": result.step, "metrics": result.metrics}
                except (ServiceError, EngineError) as exc:
                    return {"type": "error", "error": {"message": str(exc), "type": exc.type}}
                except Exception as exc:  # noqa: BLE001 - reported to the client, the server stays up
                    logger.exception("training failed")
                    return {"type": "error", "error": {"message": f"{type(exc).__name__}: {exc}", "type": "training_error"}}
                finally:
                    loop.call_soon_threadsafe(events.put_nowait, None)

            task = asyncio.create_task(work())
            while (event := await events.get()) is not None:
                yield (json.dumps(event, default=str) + "\n").encode()
            yield (json.dumps(await task, default=str) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/art/v1/models/{name}/train")
    async def train(name: str, request: Request) -> StreamingResponse:
        body: _TrainBody = _parse(_TrainBody, await _json(request))
        await service.restore(name)  # after a restart: known again from its run directory
        service.check_train(name, body.groups)  # unknown model or bad trajectories: an error before the stream starts
        return _stream_training(lambda p: service.train(name, body.groups, body.config, p, step_id=body.step_id))

    @app.post("/art/v1/models/{name}/train_sft")
    async def train_sft(name: str, request: Request) -> StreamingResponse:
        body: _SFTBody = _parse(_SFTBody, await _json(request))
        await service.restore(name)
        service.check_train(name, [TrajectoryGroup(body.trajectories)])
        return _stream_training(lambda p: service.train_sft(name, body.trajectories, body.config, p,
                                                            step_id=body.step_id))

    @app.post("/art/v1/models/{name}/log")
    async def log(name: str, request: Request) -> dict[str, Any]:
        body: _LogBody = _parse(_LogBody, await _json(request))
        return await service.log(name, body.groups, body.split, body.step)

    @app.get("/art/v1/models/{name}/checkpoints")
    async def checkpoints(name: str) -> dict[str, list[int]]:
        return {"steps": await service.list_checkpoints(name)}

    @app.post("/art/v1/models/{name}/checkpoints/delete")
    async def delete(name: str, request: Request) -> dict[str, list[int]]:
        body: _DeleteBody = _parse(_DeleteBody, await _json(request))
        return {"deleted": await service.delete_checkpoints(name, body.steps, body.best_checkpoint_metric)}

    return app


