"""One embedded-engine replica as its own process: a `TransformersEngine` behind the `Engine` protocol over
HTTP on loopback. `WorkerEngine` (remote_engine.py) starts it and is its client.

    python -m art_train.serving.worker --model PATH --port N [--host 127.0.0.1] [--device cpu] [--dtype auto] [--model-config JSON]

Every request needs ``Authorization: Bearer $ART_WORKER_KEY`` (the key comes in the environment, so `ps`
does not show it). Routes, all POST but /health: /chat, /chat_stream (one JSON line per chunk; an error as
a line ``{"error": ...}``), /load, /unload, /logprobs, /fingerprint.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hmac
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

__all__ = ["create_worker_app", "request_from_json", "request_to_json"]

logger = logging.getLogger(__name__)


def request_to_json(request: Any) -> dict[str, Any]:
    """A `ChatRequest` as JSON types."""
    return dataclasses.asdict(request)


def request_from_json(data: dict[str, Any]) -> Any:
    from ..engines.base import ChatRequest, SamplingParams

    sampling = dict(data.get("sampling") or {})
    sampling["stop"] = tuple(sampling.get("stop") or ())
    return ChatRequest(**{**data, "sampling": SamplingParams(**sampling)})


def create_worker_app(engine: Any, key: str) -> FastAPI:
    """The worker's FastAPI app around a started `engine`."""
    from ..engines.base import EngineError

    app = FastAPI(docs_url=None, redoc_url=None)

    @app.middleware("http")
    async def check_key(request: Request, call_next: Any) -> Any:
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if request.url.path != "/health" and not hmac.compare_digest(given.encode(), key.encode()):
            return JSONResponse({"error": {"message": "wrong worker key", "type": "authentication_error"}}, 401)
        return await call_next(request)

    @app.exception_handler(EngineError)
    async def engine_error(_: Request, exc: EngineError) -> JSONResponse:
        return JSONResponse({"error": {"message": str(exc), "type": exc.type}}, exc.status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"pid": os.getpid(), "sync_tolerance": engine.sync_tolerance,
                "sync_reference_dtype": engine.sync_reference_dtype}

    @app.post("/chat")
    async def chat(request: Request) -> JSONResponse:
        return JSONResponse(await engine.chat(request_from_json(await request.json())))

    @app.post("/chat_stream")
    async def chat_stream(request: Request) -> StreamingResponse:
        chat_request = request_from_json(await request.json())

        async def lines() -> AsyncIterator[bytes]:
            try:
                async for chunk in engine.chat_stream(chat_request):
                    yield (json.dumps(chunk) + "\n").encode()
            except EngineError as exc:
                yield (json.dumps({"error": {"message": str(exc), "type": exc.type, "status": exc.status}}) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/load")
    async def load(request: Request) -> dict[str, bool]:
        body = await request.json()
        await engine.load_adapter(body["name"], Path(body["path"]))
        return {"ok": True}

    @app.post("/unload")
    async def unload(request: Request) -> dict[str, bool]:
        await engine.unload_adapter((await request.json())["name"])
        return {"ok": True}

    @app.post("/logprobs")
    async def logprobs(request: Request) -> dict[str, Any]:
        body = await request.json()
        return {"logprobs": await engine.sequences_logprobs(body["sequences"], body.get("adapter"))}

    @app.post("/fingerprint")
    async def fingerprint(request: Request) -> dict[str, Any]:
        return {"fingerprint": await engine.adapter_fingerprint((await request.json())["name"])}

    return app


async def _serve(args: argparse.Namespace, key: str) -> None:
    import uvicorn

    from art_core import ModelConfig

    from ..engines.transformers import TransformersEngine
    from ..threads import use_fresh_threads

    use_fresh_threads()  # adapter loads and fingerprints leave no OpenMP pool behind (threads.py)
    config = ModelConfig.model_validate_json(args.model_config) if args.model_config else None
    engine = TransformersEngine(args.model, model_config=config, device=args.device, dtype=args.dtype)
    await engine.start()  # the model is loaded before the port opens: /health answering means ready
    server = uvicorn.Server(uvicorn.Config(create_worker_app(engine, key), host=args.host, port=args.port,
                                           log_level="warning", lifespan="off"))
    parent = os.getppid()

    async def orphaned() -> None:  # the server that started it was killed: leave no stray worker behind
        while os.getppid() == parent:
            await asyncio.sleep(2.0)
        logger.warning("the process that started this worker (pid %d) is gone; exiting", parent)
        server.should_exit = True

    watch = asyncio.create_task(orphaned())
    try:
        await server.serve()
    finally:
        watch.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m art_train.serving.worker")
    parser.add_argument("--model", required=True, help="base model folder")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (a Ray replica binds its node's IP)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--model-config", default=None, help="the model's ModelConfig as JSON")
    args = parser.parse_args(argv)
    key = os.environ.pop("ART_WORKER_KEY", "")
    if not key:
        parser.error("set ART_WORKER_KEY in the environment (the key clients send)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_serve(args, key))


if __name__ == "__main__":
    main()
