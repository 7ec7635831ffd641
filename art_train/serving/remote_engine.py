"""`WorkerEngine`: the embedded engine in a child process (`worker.py`), seen as an `Engine`.

It starts ``python -m art_train.serving.worker`` in its own process group on a free loopback port, with
a random key, and forwards each protocol call over HTTP. A dropped connection or a dead process raises
`EngineUnavailable`; the `ReplicaSet` restarts the replica (this class never restarts itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from ..engines.base import ChatRequest, EngineError, EngineUnavailable
from ..engines.child import free_port, stop_group
from .worker import request_to_json

__all__ = ["WorkerEngine"]

logger = logging.getLogger(__name__)


class WorkerEngine:
    """A `TransformersEngine` in its own process.

    Example:
        engine = WorkerEngine("/models/smollm2", model_config=model.config, device="cpu")
        await engine.start()
    """

    def __init__(self, base_model: str | Path, *, model_config: Any = None, device: str | None = None,
                 dtype: str | None = None, startup_timeout: float = 300.0, name: str = "worker",
                 host: str = "127.0.0.1", threads: int | None = None, env: dict[str, str] | None = None) -> None:
        self.base_model = str(base_model)
        self.model_config = model_config
        self.device, self.dtype = device, dtype
        self.threads = threads  # the worker's torch threads (OMP_NUM_THREADS); None: torch's default
        self.env = dict(env or {})  # over the rest of the worker's environment (a replica's GPUs)
        self.startup_timeout = startup_timeout
        self.host, self.port = host, free_port(host)
        self.sync_tolerance: float | None = None  # read from the worker once it is up
        self.sync_reference_dtype: str | None = None
        self._connect(f"http://{host}:{self.port}", secrets.token_urlsafe(32))
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.gettempdir()) / f"art-{name}-{self.port}.log"

    def _connect(self, url: str, key: str) -> None:
        """Send calls to the worker at `url` with `key` (a worker this object started, or one started elsewhere)."""
        self.url, self._key = url, key
        self._client = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600.0, connect=10.0),
                                         headers={"Authorization": f"Bearer {key}"})

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- process -------------------------------------------------------------------------------
    def _command(self) -> list[str]:
        args = [sys.executable, "-m", "art_train.serving.worker", "--model", self.base_model, "--port", str(self.port),
                "--host", self.host]
        if self.device:
            args += ["--device", self.device]
        if self.dtype:
            args += ["--dtype", self.dtype]
        if self.model_config is not None and hasattr(self.model_config, "model_dump_json"):
            args += ["--model-config", self.model_config.model_dump_json()]
        return args

    async def start(self) -> None:
        if self._proc is not None:
            return
        env = {**os.environ, "ART_WORKER_KEY": self._key}
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(self._command(), env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        logger.info("started an engine worker (pid %d) on %s, log %s", self._proc.pid, self.url, self.log_path)
        try:
            info = await self._wait_ready()
        except BaseException:
            await asyncio.to_thread(self._kill)
            raise
        self.sync_tolerance = info.get("sync_tolerance")
        self.sync_reference_dtype = info.get("sync_reference_dtype")

    async def _wait_ready(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.startup_timeout
        while loop.time() < deadline:
            if not self.alive():
                tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
                raise EngineUnavailable(f"the engine worker exited during startup; log tail:\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                r = await self._client.get("/health", timeout=2)
                if r.status_code == 200:
                    return dict(r.json())
            await asyncio.sleep(0.3)
        raise EngineUnavailable(f"the engine worker did not become ready in {self.startup_timeout:.0f}s; "
                                f"see {self.log_path}")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        stop_group(proc, grace=20)

    async def stop(self) -> None:
        await asyncio.to_thread(self._kill)
        await self._client.aclose()

    # -- calls ---------------------------------------------------------------------------------
    def _gone(self, exc: Exception) -> EngineUnavailable:
        state = "running" if self.alive() else "gone"
        return EngineUnavailable(f"engine worker {self.url} (pid {self.pid}, {state}) did not answer: "
                                 f"{type(exc).__name__}: {exc}")

    @staticmethod
    def _error(status: int, text: str) -> EngineError:
        try:
            error = json.loads(text).get("error") or {}
        except ValueError:
            error = {}
        return EngineError(error.get("message") or text, status=status, type=error.get("type") or "engine_error")

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            r = await self._client.post(path, json=body)
        except httpx.TransportError as exc:
            raise self._gone(exc) from exc
        if r.status_code >= 400:
            raise self._error(r.status_code, r.text)
        return r.json()

    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        return dict(await self._post("/chat", request_to_json(request)))

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        try:
            async with self._client.stream("POST", "/chat_stream", json=request_to_json(request)) as r:
                if r.status_code >= 400:
                    raise self._error(r.status_code, (await r.aread()).decode(errors="replace"))
                async for line in r.aiter_lines():
                    if not line:
                        continue
                    chunk = json.loads(line)
                    if "error" in chunk:
                        e = chunk["error"]
                        raise EngineError(e["message"], status=e.get("status", 500), type=e.get("type", "engine_error"))
                    yield chunk
        except httpx.TransportError as exc:
            raise self._gone(exc) from exc

    async def load_adapter(self, name: str, path: Path) -> None:
        await self._post("/load", {"name": name, "path": str(path)})

    async def unload_adapter(self, name: str) -> None:
        await self._post("/unload", {"name": name})

    async def sequence_logprobs(self, token_ids: list[int], adapter: str | None) -> list[float]:
        return (await self.sequences_logprobs([token_ids], adapter))[0]

    async def sequences_logprobs(self, sequences: list[list[int]], adapter: str | None) -> list[list[float]]:
        return list((await self._post("/logprobs", {"sequences": sequences, "adapter": adapter}))["logprobs"])

    async def adapter_fingerprint(self, name: str) -> str | None:
        fp = (await self._post("/fingerprint", {"name": name}))["fingerprint"]
        return None if fp is None else str(fp)
