"""Trainer ranks 1..N-1 as Ray actors (`BackendConfig(train_procs=N, train_launcher="ray")`).

Each rank is one Ray actor, placed by Ray from the options given (``num_cpus``, ``num_gpus``,
``resources``, ``scheduling_strategy``), that runs `rank.serve_rank`: the same loop as a child-process
rank, joining rank 0's group at rank 0's node IP. Ray only places and owns the process: commands and
gradients go over torch.distributed, never through Ray.

A rank whose actor dies (killed, or its node gone) ends as a child that exits does: rank 0 sees it in
`RayRank.wait`, the step fails with `RankFailedError` and the next step starts new actors. The run
directory must be on a filesystem every rank's node sees: a rank reads rank 0's newest checkpoint.

Ray is imported only here, and only when `RayRanks` is made; it calls ``ray.init()`` if Ray is not
initialised yet (joining ``RAY_ADDRESS`` when set), as the replicas' launcher does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from .distributed import RankProcess, rank_device

__all__ = ["RayRank", "RayRanks"]

logger = logging.getLogger(__name__)


class _RankActor:
    """The Ray actor of one rank: `run` is the rank's whole life."""

    def __init__(self, threads: int, world: int) -> None:
        import torch

        torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // world))

    def info(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def run(self, rank: int, world: int, addr: str, port: int, device: str, timeout_s: float) -> None:
        import ray

        from .rank import serve_rank

        # an actor given GPUs sees only those (CUDA_VISIBLE_DEVICES): its first is its own
        own = "cuda:0" if device.startswith("cuda") and ray.get_gpu_ids() else rank_device(device, rank)
        serve_rank(rank, world, addr, port, own, timeout_s)


class RayRank:
    """One rank's actor, as rank 0 sees it (a `RankProcess`)."""

    def __init__(self, actor: Any, info: Any, done: Any) -> None:
        self.actor = actor
        self._info = info  # ObjectRef of the actor's info(): it runs before run()
        self._done = done  # ObjectRef of run(): ready once the rank returned, raised or its actor died
        self._known: dict[str, Any] | None = None

    def _get_info(self) -> dict[str, Any]:
        import ray

        if self._known is None:
            self._known = ray.get(self._info, timeout=60)
        return self._known

    @property
    def pid(self) -> int:
        return int(self._get_info()["pid"])

    @property
    def node_id(self) -> str:
        """The Ray node the rank runs on."""
        return str(self._get_info()["node_id"])

    def wait(self, timeout: float) -> str | None:
        import ray

        done, _ = ray.wait([self._done], timeout=timeout)
        if not done:
            return None
        try:
            ray.get(self._done)
        except ray.exceptions.RayActorError as exc:
            return f"died with its Ray actor ({type(exc).__name__})"
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if exc.cause is not None else exc
            return f"raised {type(cause).__name__}: {(str(cause).splitlines() or [''])[0]}"
        except ray.exceptions.RayError as exc:  # its node or owner gone, ...
            return f"was lost by Ray ({type(exc).__name__})"
        return "returned"

    def end(self) -> None:
        import ray

        ray.kill(self.actor, no_restart=True)
        ray.wait([self._done], timeout=30)


class RayRanks:
    """Starts ranks 1..N-1 as Ray actors (a `RankLauncher` for `distributed.Ranks`).

    `options` go to every rank's actor (``.options(**options)``), e.g. ``{"num_gpus": 1}`` or
    ``{"num_cpus": 2, "resources": {"trainer": 1}}``. A rank takes ``num_cpus`` torch threads when that is
    given (and above 0), else its node's cores // N, as a child-process rank does.

    Example:
        ranks = Ranks(2, "cpu", launcher=RayRanks({"num_cpus": 1, "resources": {"trainer": 1}}))
        trainer = Trainer(model, rundir, device="cpu", ranks=ranks)
    """

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        import ray

        from ..serving.ray_replicas import init_ray

        init_ray()
        self.options = dict(options or {})
        self.host = ray.util.get_node_ip_address()  # rank 0's node: where the other nodes reach its store

    def start(self, rank: int, world: int, port: int, device: str, timeout_s: float) -> RankProcess:
        import ray

        cpus = self.options.get("num_cpus") or 0
        actor: Any = ray.remote(_RankActor).options(**self.options).remote(int(cpus) if cpus >= 1 else 0, world)
        info = actor.info.remote()
        done = actor.run.remote(rank, world, self.host, port, device, timeout_s)
        logger.info("trainer rank %d: a Ray actor joins rank 0's group at %s:%d", rank, self.host, port)
        return RayRank(actor, info, done)
