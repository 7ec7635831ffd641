"""Engine replicas as Ray actors (`BackendConfig(replica_launcher="ray")`).

Each replica is one Ray actor, placed by Ray from the options given (``num_cpus``, ``num_gpus``,
``resources``, ``scheduling_strategy``). The actor starts the same embedded-engine worker process as a
local replica (``python -m art_train.serving.worker``, via `WorkerEngine`) on its own node, bound to the
node's IP, and hands back the worker's URL and key; the server then talks to the worker over HTTP with a
`WorkerEngine` client, as with a local replica. Ray only places and owns the process: requests never go
through Ray.

Killing the actor kills its worker (the worker exits when the process that started it is gone), and
`RayWorkerEngine.stop` kills the actor. Restarts are the `ReplicaSet`'s, as for local replicas: a dead
worker or actor is seen as a dropped request or by `alive()`, and a new actor is started.

Ray is imported only here, and only when a launcher is asked for; ``ray.init()`` is called if Ray is not
initialised yet (joining ``RAY_ADDRESS`` when set), as `art_core.ray_gather` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..engines.base import Engine, EngineUnavailable
from .remote_engine import WorkerEngine
from .replicas import Launch

__all__ = ["RayWorkerEngine", "init_ray", "ray_launcher"]

logger = logging.getLogger(__name__)

# each replica takes a CPU and Ray spreads them over nodes, unless the options given say otherwise
DEFAULT_OPTIONS: dict[str, Any] = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}


class _WorkerActor:
    """The Ray actor of one replica: starts the worker process on its node and owns it."""

    def __init__(self, base_model: str, model_config: Any, device: str | None, dtype: str | None, name: str) -> None:
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        self.worker = WorkerEngine(base_model, model_config=model_config, device=device, dtype=dtype, name=name,
                                   host=ray.util.get_node_ip_address())

    async def start(self) -> dict[str, Any]:
        await self.worker.start()
        return {"url": self.worker.url, "key": self.worker._key, "pid": self.worker.pid, "node_id": self.node_id,
                "sync_tolerance": self.worker.sync_tolerance, "sync_reference_dtype": self.worker.sync_reference_dtype}

    async def wait_exit(self) -> None:
        """Returns once the worker process has exited."""
        while self.worker.alive():
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        await self.worker.stop()


class RayWorkerEngine(WorkerEngine):
    """The client of a worker process that a Ray actor started (on whichever node Ray placed it).

    Example:
        engine = RayWorkerEngine("/models/smollm2", model_config=model.config, options={"num_gpus": 1})
        await engine.start()
    """

    def __init__(self, base_model: str | Path, *, model_config: Any = None, device: str | None = None,
                 dtype: str | None = None, name: str = "worker", options: Mapping[str, Any] | None = None) -> None:
        super().__init__(base_model, model_config=model_config, device=device, dtype=dtype, name=name)
        self.name = name
        self.options = {**DEFAULT_OPTIONS, **(options or {})}
        self.actor: Any = None
        self.node_id: str | None = None  # the Ray node the actor (and its worker) runs on
        self.worker_pid: int | None = None  # the worker's pid on that node
        self._exited: Any = None  # an ObjectRef of the actor's wait_exit(): ready once the worker or actor is gone

    @property
    def pid(self) -> int | None:
        return self.worker_pid

    def alive(self) -> bool:
        import ray

        if self._exited is None:
            return False
        done, _ = ray.wait([self._exited], timeout=0)
        return not done

    async def start(self) -> None:
        if self.actor is not None:
            return
        import ray

        actor_class = ray.remote(_WorkerActor)
        self.actor = actor_class.options(**self.options).remote(
            self.base_model, self.model_config, self.device, self.dtype, self.name)
        try:
            info = await self.actor.start.remote()
        except Exception as exc:
            await self.stop()
            raise EngineUnavailable(f"the Ray actor of engine {self.name} did not start its worker: {exc}") from exc
        await self._client.aclose()
        self._connect(info["url"], info["key"])
        self.node_id, self.worker_pid = info["node_id"], info["pid"]
        self.sync_tolerance, self.sync_reference_dtype = info["sync_tolerance"], info["sync_reference_dtype"]
        self._exited = self.actor.wait_exit.remote()
        logger.info("engine %s: a Ray actor on node %s started its worker (pid %s) at %s", self.name,
                    self.node_id, self.worker_pid, self.url)

    async def stop(self) -> None:
        import ray

        actor, self.actor, self._exited = self.actor, None, None
        if actor is not None:
            with contextlib.suppress(Exception):  # the actor may be gone already: it is killed below either way
                await asyncio.wait_for(actor.stop.remote(), 30)
            ray.kill(actor)
        await self._client.aclose()


def init_ray() -> None:
    """`ray.init()` unless Ray is initialised: joins RAY_ADDRESS when set, else starts a local Ray."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # joins that cluster
        logger.info("joined the Ray cluster at %s", os.environ["RAY_ADDRESS"])
    else:
        ray.init(include_dashboard=False)
        logger.info("started a local Ray; call ray.init() first (or set RAY_ADDRESS) for a cluster")


def ray_launcher(path: Path, model_config: Any, device: str | None, dtype: str,
                 options: Mapping[str, Any] | None = None) -> Launch:
    """Starts replica i as a Ray actor that runs the embedded engine's worker process on its node.

    `options` go to every replica's actor (``.options(**options)``) over ``DEFAULT_OPTIONS``; e.g.
    ``{"num_gpus": 1}`` or ``{"num_cpus": 0, "resources": {"inference": 1}}``.

    Example:
        engine = ReplicaSet(ray_launcher(path, model.config, "cuda", "auto", {"num_gpus": 1}), 2)
        await engine.start()
    """
    init_ray()

    async def launch(index: int) -> Engine:
        engine = RayWorkerEngine(path, model_config=model_config, device=device, dtype=dtype,
                                 name=f"replica{index}", options=options)
        await engine.start()
        return engine  # type: ignore[return-value]

    return launch
