"""N engine replicas behind one `Engine`: routing, retries and restarts.

A replica is whatever `launch(i)` returns: a started `Engine` (a `WorkerEngine` process for the embedded
engine, a `VLLMEngine` for vLLM; Ray actors can be another launcher). The set

- routes each request with the `Router` among the replicas that are up and hold its adapter;
- takes a replica out when it dies (its process gone, or a call raising `EngineUnavailable`) or fails
  the weight-sync check (`take_out`, called by the swap), restarts it in the background, and lets it
  serve again only after each model's swap has loaded its adapters there and verified the served step
  (the rejoin hooks, `add_rejoin`);
- retries a request that its replica dropped on another one: a whole non-streamed call, a stream only
  if no chunk was sent yet (else a clear `EngineUnavailable`). A request waits up to `wait_s` for a
  replica that holds its adapter (e.g. while all of them restart).

Which adapters a replica may serve is set by the swap (`serve`): an adapter is servable on a replica
only once loaded and, for a newly trained step, verified there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engines.base import ChatRequest, Engine, EngineError, EngineUnavailable, Sleeps
from ..engines.child import core_share
from .router import Router, session_key

__all__ = ["Launch", "Replica", "ReplicaSet", "core_share", "local_launcher"]

logger = logging.getLogger(__name__)

Launch = Callable[[int], Awaitable[Engine]]  # starts replica i; returns it started
Rejoin = Callable[[Engine], Awaitable[list[str]]]  # loads (and verifies) a model's adapters; returns their names


@dataclass
class Replica:
    index: int
    engine: Engine | None = None
    up: bool = False
    adapters: set[str] = field(default_factory=set)  # what requests may be routed here for
    inflight: int = 0
    served: int = 0
    failures: int = 0  # times taken out (died, dropped a request, failed the weight-sync check)
    restarts: int = 0


class ReplicaSet:
    """An `Engine` over `n` replicas started by `launch` (see the module docstring).

    Example:
        engine = ReplicaSet(local_launcher("transformers", path, model.config, "cpu", "auto"), 2)
        await engine.start()
    """

    def __init__(self, launch: Launch, n: int, *, router: Router | None = None, wait_s: float = 300.0,
                 attempts: int = 4, name: str = "engine") -> None:
        if n < 1:
            raise ValueError(f"replicas must be >= 1, got {n}")
        self.launch, self.name = launch, name
        self.replicas = [Replica(i) for i in range(n)]
        self.router = router or Router()
        self.wait_s, self.attempts = wait_s, attempts
        self.sync_tolerance: float | None = None
        self.sync_reference_dtype: str | None = None
        self._rejoin: list[Rejoin] = []
        self._restarting: dict[int, asyncio.Task[None]] = {}
        self._monitor: asyncio.Task[None] | None = None
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._monitor is not None:
            return
        engines = await asyncio.gather(*(self.launch(r.index) for r in self.replicas), return_exceptions=True)
        failed = [e for e in engines if isinstance(e, BaseException)]
        if failed:
            await asyncio.gather(*(e.stop() for e in engines if not isinstance(e, BaseException)),
                                 return_exceptions=True)
            raise failed[0]
        for r, engine in zip(self.replicas, engines, strict=True):
            r.engine, r.up = engine, True  # type: ignore[assignment]
        first = self.replicas[0].engine
        self.sync_tolerance, self.sync_reference_dtype = first.sync_tolerance, first.sync_reference_dtype  # type: ignore[union-attr]
        self._monitor = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        self._stopping = True
        tasks = [t for t in (self._monitor, *self._restarting.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(r.engine.stop() for r in self.replicas if r.engine is not None), return_exceptions=True)
        for r in self.replicas:
            r.engine, r.up = None, False

    async def _watch(self) -> None:
        """Notice a replica whose process is gone even when no request is using it."""
        while not self._stopping:
            await asyncio.sleep(1.0)
            for r in self.replicas:
                alive = getattr(r.engine, "alive", None)
                if r.up and r.engine is not None and callable(alive) and not alive():
                    self.take_out(r.index, r.engine, "its process exited")

    # -- what the swap uses --------------------------------------------------------------------
    def add_rejoin(self, hook: Rejoin) -> None:
        """Run `hook` on every restarted replica before it serves (one per model served here)."""
        self._rejoin.append(hook)

    def members(self) -> list[tuple[int, Engine]]:
        """The replicas up now, as (index, engine)."""
        return [(r.index, r.engine) for r in self.replicas if r.up and r.engine is not None]

    def serve(self, index: int, engine: Engine, adapter: str) -> None:
        """Let requests for `adapter` go to replica `index` (if it still runs `engine`)."""
        r = self.replicas[index]
        if r.engine is engine and r.up:
            r.adapters.add(adapter)

    def take_out(self, index: int, engine: Engine, reason: str) -> None:
        """Stop routing to replica `index` and restart it in the background (once, if it still runs `engine`)."""
        r = self.replicas[index]
        if r.engine is not engine or not r.up or self._stopping:
            return
        r.up, r.failures = False, r.failures + 1
        r.adapters.clear()
        logger.error("%s replica %d taken out (%s); restarting it", self.name, index, reason)
        self._restarting[index] = asyncio.create_task(self._restart(r))

    async def _restart(self, r: Replica) -> None:
        delay = 1.0
        while not self._stopping:
            old, r.engine = r.engine, None
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.stop()
            try:
                r.engine = await self.launch(r.index)
                adapters: set[str] = set()
                for hook in self._rejoin:  # each model: load its adapters, verify the served step
                    adapters.update(await hook(r.engine))
            except Exception:  # noqa: BLE001 - logged; the replica stays out and is tried again
                logger.exception("%s replica %d did not come back; trying again in %.0fs", self.name, r.index, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            r.adapters, r.up, r.restarts = adapters, True, r.restarts + 1
            logger.info("%s replica %d is back (restart %d), serving %s", self.name, r.index, r.restarts,
                        sorted(adapters))
            break
        self._restarting.pop(r.index, None)

    # -- sleep mode: every replica up sleeps while a step trains ------------------------------
    @property
    def sleep_mode(self) -> bool:
        return any(isinstance(r.engine, Sleeps) and r.engine.sleep_mode for r in self.replicas)

    async def _each(self, call: Callable[[Sleeps], Awaitable[None]]) -> None:
        members = [(i, e) for i, e in self.members() if isinstance(e, Sleeps)]
        results = await asyncio.gather(*(call(e) for _, e in members), return_exceptions=True)
        for (i, engine), result in zip(members, results, strict=True):
            if isinstance(result, EngineUnavailable):
                self.take_out(i, engine, str(result))  # it restarts awake
            elif isinstance(result, BaseException):
                raise result

    async def sleep(self) -> None:
        await self._each(lambda e: e.sleep())

    async def wake_up(self) -> None:
        await self._each(lambda e: e.wake_up())

    # -- routing -------------------------------------------------------------------------------
    async def _pick(self, adapter: str | None, key: str | None) -> Replica:
        """The replica for a request (waiting up to `wait_s` for one that is up and holds `adapter`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            candidates = [r for r in self.replicas if r.up and (adapter is None or adapter in r.adapters)]
            if candidates:
                return self.router.pick(candidates, key)  # type: ignore[return-value]
            if loop.time() > deadline or self._stopping:
                raise EngineError(f"no replica of {self.name} is up and serving {adapter or 'the base model'} "
                                  f"after {self.wait_s:.0f}s; states: {self.describe()}", status=503,
                                  type="engine_unavailable")
            await asyncio.sleep(0.05)

    def describe(self) -> list[dict[str, Any]]:
        return [{"replica": r.index, "up": r.up, "inflight": r.inflight, "served": r.served, "failures": r.failures,
                 "restarts": r.restarts, "adapters": sorted(r.adapters)} for r in self.replicas]

    async def _call(self, adapter: str | None, key: str | None, call: Callable[[Engine], Awaitable[Any]]) -> Any:
        """`call` on a picked replica; on `EngineUnavailable`, take it out and try another."""
        for attempt in range(1, self.attempts + 1):
            r = await self._pick(adapter, key)
            engine = r.engine
            assert engine is not None
            r.inflight += 1
            try:
                result = await call(engine)
            except EngineUnavailable as exc:
                self.take_out(r.index, engine, str(exc))
                if attempt == self.attempts:
                    raise
                logger.warning("%s replica %d dropped a request; retrying on another (attempt %d)", self.name,
                               r.index, attempt + 1)
                continue
            finally:
                r.inflight -= 1
            r.served += 1
            return result
        raise AssertionError("unreachable")

    # -- the Engine protocol -------------------------------------------------------------------
    async def chat(self, request: ChatRequest) -> dict[str, Any]:
        key = session_key(request.session, request.messages)
        return dict(await self._call(request.adapter, key, lambda e: e.chat(request)))

    async def chat_stream(self, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        key = session_key(request.session, request.messages)
        for attempt in range(1, self.attempts + 1):
            r = await self._pick(request.adapter, key)
            engine, sent = r.engine, False
            assert engine is not None
            r.inflight += 1
            try:
                async for chunk in engine.chat_stream(request):
                    sent = True
                    yield chunk
            except EngineUnavailable as exc:
                self.take_out(r.index, engine, str(exc))
                if sent:
                    raise EngineUnavailable(f"{self.name} replica {r.index} died while streaming this reply, after "
                                            "its first chunks were sent; the reply is incomplete: send the request "
                                            "again") from exc
                if attempt == self.attempts:
                    raise
                continue
            finally:
                r.inflight -= 1
            r.served += 1
            return

    async def load_adapter(self, name: str, path: Path) -> None:
        """Load `name` on every replica up (servable there at once: for steps loaded on demand)."""
        members = self.members()
        results = await asyncio.gather(*(e.load_adapter(name, path) for _, e in members), return_exceptions=True)
        for (i, engine), result in zip(members, results, strict=True):
            if isinstance(result, EngineUnavailable):
                self.take_out(i, engine, str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                self.serve(i, engine, name)

    async def unload_adapter(self, name: str) -> None:
        for r in self.replicas:
            r.adapters.discard(name)
        members = self.members()
        results = await asyncio.gather(*(e.unload_adapter(name) for _, e in members), return_exceptions=True)
        for (i, engine), result in zip(members, results, strict=True):
            if isinstance(result, EngineUnavailable):
                self.take_out(i, engine, str(result))

    async def sequence_logprobs(self, token_ids: list[int], adapter: str | None) -> list[float]:
        return (await self.sequences_logprobs([token_ids], adapter))[0]

    async def sequences_logprobs(self, sequences: list[list[int]], adapter: str | None) -> list[list[float]]:
        return list(await self._call(adapter, None, lambda e: e.sequences_logprobs(sequences, adapter)))

    async def adapter_fingerprint(self, name: str) -> str | None:
        result = await self._call(name, None, lambda e: e.adapter_fingerprint(name))
        return None if result is None else str(result)


def local_launcher(kind: str, path: Path, model_config: Any, device: str | None, dtype: str,
                   vllm_python: str | None = None, replicas: int = 1, devices: list[str] | None = None) -> Launch:
    """Starts replica i as a local process: a `WorkerEngine` (embedded engine) or a `VLLMEngine` that does not
    restart itself (the set does). On a CPU each embedded worker gets cores // `replicas` torch threads: at
    torch's default every worker takes all cores and two replicas on 2 cores served 0.15x one replica's
    tokens/s (`benchmarks/results/scale.json`). Each vLLM replica on a CPU is bound to its share of the cores
    (`core_share`, as ``VLLM_CPU_OMP_THREADS_BIND`` unless that is set): vLLM's 'auto' binding puts every
    replica on the same cores. `devices`: replica i's process sees the GPUs ``CUDA_VISIBLE_DEVICES=devices[i]``
    (`BackendConfig.replica_devices`), also after a restart."""
    threads = max(1, (os.cpu_count() or 1) // max(1, replicas))  # CPU ops only: harmless on a GPU
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))

    async def launch(index: int) -> Engine:
        engine: Any
        env = {"CUDA_VISIBLE_DEVICES": devices[index]} if devices else None
        if kind == "vllm":
            from ..engines.vllm_engine import VLLMEngine

            engine = VLLMEngine(path, model_config=model_config, python=vllm_python, restart=False,
                                cpus=core_share(cpus, replicas, index) if replicas > 1 else None, env=env)
        elif kind == "transformers":
            from .remote_engine import WorkerEngine

            engine = WorkerEngine(path, model_config=model_config, device=device, dtype=dtype, name=f"replica{index}",
                                  threads=threads, env=env)
        else:
            raise ValueError(f"unknown engine {kind!r}; use 'transformers' or 'vllm'")
        await engine.start()
        return engine  # type: ignore[no-any-return]

    return launch
