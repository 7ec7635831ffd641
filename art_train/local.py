"""`LocalBackend`: the whole backend in this process.

The same FastAPI app as `art serve` runs under uvicorn in a background thread (its own event loop)
on a free 127.0.0.1 port, so `model.openai_client()` works exactly as against a remote server;
`train` and friends call the service in that loop directly, without HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from rich.progress import Progress

from art_core import Model, Registration, SFTConfig, TrainConfig, TrainResult, Trajectory, TrajectoryGroup
from art_core.backend import DEFAULT_BEST_METRIC
from art_core.config import train_config

from .config import BackendConfig
from .service import ModelService
from .threads import use_fresh_threads

__all__ = ["LocalBackend"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class LocalBackend:
    """Train and serve in this process (the transformers engine by default, or vLLM).

    Args:
        path: run-directory root (default ``ART_HOME`` or ``./.art``).
        engine: "transformers" or "vllm"; None uses each model's ``config.engine``.
        device: torch device ("cpu", "cuda"); default cuda when available.
        port: port for the OpenAI endpoint; 0 picks a free one.
        vllm_python, sync_tolerance, engine_dtype, sync_probe_tokens, train_procs, train_shard: see `BackendConfig`.
        config: all of the above as one `BackendConfig` (then pass none of them).

    Example:
        backend = LocalBackend()
        await model.register(backend)
        client = model.openai_client()
    """

    def __init__(
        self,
        *,
        path: str | os.PathLike[str] | None = None,
        engine: str | None = None,
        device: str | None = None,
        port: int = 0,
        vllm_python: str | None = None,
        sync_tolerance: float | None = None,
        engine_dtype: str | None = None,
        sync_probe_tokens: int | None = None,
        train_procs: int | None = None,
        train_shard: Literal["fsdp"] | None = None,
        config: BackendConfig | None = None,
    ) -> None:
        options = {"path": path, "engine": engine, "device": device, "port": port, "vllm_python": vllm_python,
                   "sync_tolerance": sync_tolerance, "engine_dtype": engine_dtype,
                   "sync_probe_tokens": sync_probe_tokens, "train_procs": train_procs, "train_shard": train_shard}
        if config is None:
            config = BackendConfig(**{k: v for k, v in options.items() if v is not None})  # None: the default
        elif any(v not in (None, 0) for v in options.values()):
            raise TypeError("pass either config=BackendConfig(...) or its fields, not both")
        self.config = config
        self.service = ModelService(config)
        self.port = config.port
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Any = None

    # -- the server thread ---------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is not None:
            return
        import uvicorn

        from .server import create_app

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        port = sock.getsockname()[1]
        config = uvicorn.Config(create_app(self.service), log_level="warning", lifespan="off",
                                timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            use_fresh_threads(loop)  # no OpenMP pool outlives the trainer call that made it (threads.py)
            self._loop = loop
            loop.call_soon(ready.set)
            try:
                loop.run_until_complete(self._server.serve(sockets=[sock]))
            finally:
                loop.run_until_complete(self.service.close())
                loop.close()

        self._thread = threading.Thread(target=run, name="art-local-backend", daemon=True)
        self._thread.start()
        ready.wait()
        self.url = f"http://127.0.0.1:{port}"
        logger.info("LocalBackend serving on %s/v1", self.url)

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        self._start()
        assert self._loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    # -- Backend -------------------------------------------------------------------------------
    async def register(self, model: Model) -> Registration:
        self._start()
        entry = await self._call(self.service.register(model))
        return Registration(base_url=f"{self.url}/v1", api_key="art", served_name=model.name, step=entry.step or 0)

    async def get_step(self, model: Model) -> int:
        return await self._call(self.service.get_step(model.name))

    async def _with_progress(self, run: Any, verbose: bool) -> TrainResult:
        with Progress(disable=not verbose, transient=True) as progress:
            task = progress.add_task("train", total=None)

            def report(event: dict[str, Any]) -> None:
                progress.update(task, description=str(event.get("phase", "train")),
                                completed=event.get("done"), total=event.get("total"))

            return await self._call(run(report))

    async def train(self, model: Model, groups: list[TrajectoryGroup], config: TrainConfig | None = None, *,
                    verbose: bool = True, **fields: Any) -> TrainResult:
        """One step on `groups`; `fields` set `TrainConfig` fields (``learning_rate=1e-5``), as OpenPipe ART's
        ``backend.train`` takes them."""
        config = train_config(config, fields)
        return await self._with_progress(lambda p: self.service.train(model.name, groups, config, p), verbose)

    async def train_sft(self, model: Model, trajectories: list[Trajectory], config: SFTConfig, *,
                        verbose: bool = True) -> TrainResult:
        return await self._with_progress(lambda p: self.service.train_sft(model.name, trajectories, config, p), verbose)

    async def log(self, model: Model, groups: list[TrajectoryGroup], split: str, step: int | None) -> dict[str, Any]:
        return await self._call(self.service.log(model.name, groups, split, step))

    async def list_checkpoints(self, model: Model) -> list[int]:
        return await self._call(self.service.list_checkpoints(model.name))

    async def delete_checkpoints(self, model: Model, steps: list[int] | None = None, *,
                                 best_checkpoint_metric: str | None = DEFAULT_BEST_METRIC) -> list[int]:
        return await self._call(self.service.delete_checkpoints(model.name, steps, best_checkpoint_metric))

    async def close(self) -> None:
        """Stop the server and the engines (idempotent)."""
        if self._thread is None:
            return
        self._server.should_exit = True
        await asyncio.to_thread(self._thread.join, 60)
        self._thread = None
        self._loop = None

    async def __aenter__(self) -> LocalBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __enter__(self) -> LocalBackend:
        """``with LocalBackend() as backend:`` (OpenPipe ART's form) works as ``async with`` does."""
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_now()

    def _close_now(self) -> None:
        """`close` for a plain ``with``: the server runs in its own thread, so stopping it needs no loop."""
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(60)
        self._thread = None
        self._loop = None
