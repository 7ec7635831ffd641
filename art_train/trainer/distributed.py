"""The trainer as N ranks of one torch.distributed process group (`BackendConfig(train_procs=N)`).

Rank 0 is the service's process and its `Trainer`. Ranks 1..N-1 run `rank.serve_rank`, started by a
launcher: `ChildRanks` (child processes with the environment torchrun gives: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) or `ray_ranks.RayRanks` (one Ray actor each, on whichever node Ray places it). The group is
gloo on CPU, NCCL on CUDA (rank r on ``cuda:r``). Rank 0 tells them what to do with
`broadcast_object_list` of one small command, on a gloo group with a long timeout (`IDLE`: they wait
between steps for as long as rollouts take):

- `Register`: build that model's `Trainer` (it reads rank 0's newest checkpoint and writes nothing),
  then take rank 0's LoRA weights (a broadcast);
- `Step`: train the step's share of rows: every rank tokenizes and packs the same groups,
  `Policy.row_groups` keeps this rank's rows (`shard_row_groups`), and `Policy.optimizer_step`
  sums the LoRA gradients over ranks (`sum_grads`) before clipping, so every rank takes the same
  AdamW step the 1-rank trainer would;
- `Logprobs`: with the base sharded (`train_shard="fsdp"`, module `fsdp`), the weight-sync probe's
  forwards, which need every rank's shard;
- `Stop`.

With `shard="fsdp"` a model registers as its `Trainer` is built (`Ranks.register`), and every rank shards its
frozen base then (`Policy.shard_base`): rank 0 loads it whole into host memory and sends each rank its shard;
ranks 1..N-1 never hold more than one weight whole.

Only rank 0 writes checkpoints, the journal and history. A step that fails on any rank stops ranks
1..N-1 (a dead peer fails the collectives at once; a hung one after `timeout_s`) and raises on rank
0, where the `Trainer` rolls back as for any failed step; the next step starts them again. With a sharded
base, rank 0 first reads its base again from disk (`Trainer.reload_base`) and shards it over the new ranks.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist
from pydantic import BaseModel

from .packing import Row

if TYPE_CHECKING:
    from art_core import RunDir, TrajectoryGroup

__all__ = ["IDLE", "ChildRanks", "Logprobs", "RankFailedError", "RankLauncher", "RankProcess", "Ranks", "Register",
           "Step", "Stop", "Worker", "backend", "broadcast_params", "code_fingerprint", "rank_device", "reduce_values",
           "shard_row_groups", "sum_grads"]

logger = logging.getLogger(__name__)

# How long ranks 1..N-1 wait for rank 0's next command (longer overflows gloo's int32 milliseconds); one idle
# longer exits, and rank 0 starts it again with the next step.
IDLE = datetime.timedelta(days=7)

RowGroups = list[tuple[int, list[Row]]]  # (shared prefix length, rows), as `Policy.row_groups` gives them


# -- the pure parts: which rows a rank trains, and the reductions -----------------------------------

def shard_row_groups(groups: RowGroups, rank: int, world: int) -> RowGroups:
    """This rank's share of a batch's row groups; the shares of ranks 0..world-1 cover every row once.

    Row groups (rows that share a prompt) stay whole where there are at least `world` of them, so a
    rank runs a shared prefix once; otherwise the largest is halved until there are. Then each goes to
    the rank with the fewest tokens so far (largest first; ties: lowest rank), the same on every rank.
    """
    items = [(k, rows) for k, rows in groups if rows]
    while len(items) < world and any(len(rows) > 1 for _, rows in items):
        i = max(range(len(items)), key=lambda j: len(items[j][1]))
        k, rows = items[i]
        items[i:i + 1] = [(k, rows[: len(rows) // 2]), (k, rows[len(rows) // 2:])]
    tokens = [sum(len(r.input_ids) for r in rows) for _, rows in items]
    load = [0] * world
    owner = [0] * len(items)
    for i in sorted(range(len(items)), key=lambda j: (-tokens[j], j)):
        owner[i] = min(range(world), key=lambda r: (load[r], r))
        load[owner[i]] += tokens[i]
    return [item for item, r in zip(items, owner, strict=True) if r == rank]  # in the batch's order


def sum_grads(params: list[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over the ranks (one all_reduce per dtype). A parameter none of the
    ranks' rows reached keeps grad None, as on 1 rank (AdamW then skips it)."""
    if not params:
        return
    reached = torch.tensor([float(p.grad is not None) for p in params], device=params[0].device)
    dist.all_reduce(reached)
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for p, hit in zip(params, reached.tolist(), strict=True):
        if hit:
            by_dtype.setdefault(p.dtype, []).append(p)
    for group in by_dtype.values():
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group])
        dist.all_reduce(flat)
        offset = 0
        for p in group:
            p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()


def reduce_values(values: dict[str, Any], op: str = "sum") -> dict[str, Any]:
    """`values` summed (op "sum") or maxed ("max") over the ranks, in float64; ints stay ints."""
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return {k: int(v) if isinstance(values[k], int) else float(v) for k, v in zip(keys, t.tolist(), strict=True)}


def broadcast_params(params: list[torch.nn.Parameter]) -> None:
    """Rank 0's values of `params` on every rank (one broadcast per dtype)."""
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for p in params:
        by_dtype.setdefault(p.dtype, []).append(p)
    with torch.no_grad():
        for group in by_dtype.values():
            flat = torch.cat([p.detach().reshape(-1) for p in group])
            dist.broadcast(flat, src=0)
            offset = 0
            for p in group:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()


# -- the commands rank 0 broadcasts ---------------------------------------------------------------

# pydantic objects travel as JSON, as the journal keeps them (a registered model holds its backend: no pickle)

@dataclass(frozen=True)
class Register:
    key: str  # the model's run directory: one Trainer per model
    model: str  # TrainableModel
    rundir: RunDir
    base_path: Path
    step: int  # rank 0's newest checkpoint, which the worker loads
    shard: str | None = None  # "fsdp": shard the frozen base over the ranks after taking the LoRA (`Ranks.shard`)


@dataclass(frozen=True)
class Step:
    key: str
    kind: str  # "grpo" | "sft" (`trainer.STEPS`)
    step: int
    groups: list[str]  # TrajectoryGroup, after rank 0 dropped the stale ones
    config: str  # TrainConfig | SFTConfig, as `kind` says


@dataclass(frozen=True)
class Logprobs:
    key: str
    sequences: list[list[int]]
    step: int | None  # `Trainer.sequences_logprobs`'s arguments


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Worker:
    """Where a `Trainer` sits in the group: rank 0 (through `Ranks`) writes, the others follow. With `shard`
    "fsdp" the Trainer builds its base empty and takes its shard from rank 0 (`fsdp.shard_base`)."""

    rank: int
    world: int
    shard: str | None = None


@functools.cache
def code_fingerprint() -> str:
    """What a rank runs: a hash of this package's trainer modules and the art_core version, and where they are.
    Ranks that differ (another install on a Ray node, another checkout) would wait in collectives that never
    meet; rank 0 refuses them at start instead (`Ranks._start`)."""
    import art_core

    here = Path(__file__).parent
    digest = hashlib.sha256(art_core.__version__.encode())
    for path in sorted(here.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{digest.hexdigest()[:12]} {here}"


def backend(device: str) -> str:
    """gloo on CPU; on CUDA, NCCL for the tensors on the GPU and gloo for the metrics (CPU tensors)."""
    return "cpu:gloo,cuda:nccl" if device.startswith("cuda") else "gloo"


def rank_device(device: str, rank: int) -> str:
    return f"cuda:{rank}" if device.startswith("cuda") else device


class RankFailedError(RuntimeError):
    """A trainer rank died or failed during a step; the step was rolled back on rank 0."""


class RankProcess(Protocol):
    """One of ranks 1..N-1 as rank 0 sees it: a child process, or a Ray actor (`ray_ranks.RayRank`)."""

    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float) -> str | None:
        """None while it runs after `timeout` seconds; once it has ended, how ('exited with code -9')."""
        ...

    def end(self) -> None:
        """Kill it if it still runs, and reap it."""
        ...


class RankLauncher(Protocol):
    """Starts ranks 1..N-1: `ChildRanks` on this machine, `ray_ranks.RayRanks` as Ray actors."""

    host: str  # where the ranks reach rank 0's store (it listens on every interface)

    def start(self, rank: int, world: int, port: int, device: str, timeout_s: float) -> RankProcess:
        """Rank `rank` of `world`, joining the group whose store listens on `host`:`port`; `device` is the
        group's ("cpu", "cuda")."""
        ...


@dataclass
class _Child:
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float) -> str | None:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return f"exited with code {code}"

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # our own child, by its process object
        self.process.wait()


class ChildRanks:
    """Ranks 1..N-1 as child processes of this one, with torchrun's environment and cores // N threads each."""

    host = "127.0.0.1"

    def env(self, rank: int, world: int, port: int, device: str, timeout_s: float) -> dict[str, str]:
        """Rank `rank`'s environment: torchrun's variables, and rank 0's import path (`sys.path`) in place of
        the working directory that `python -c` would put first (another checkout's art_train, say, whose
        collectives would not meet rank 0's)."""
        path = os.pathsep.join(os.getcwd() if p == "" else p for p in sys.path)
        return {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": self.host,
                "MASTER_PORT": str(port), "ART_TRAIN_DEVICE": device, "ART_TRAIN_TIMEOUT_S": str(timeout_s),
                "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // world)), "PYTHONPATH": path,
                "PYTHONSAFEPATH": "1"}

    def start(self, rank: int, world: int, port: int, device: str, timeout_s: float) -> RankProcess:
        main = "from art_train.trainer.rank import main; main()"  # not -m: one Step class
        return _Child(subprocess.Popen([sys.executable, "-c", main], env=self.env(rank, world, port, device, timeout_s)))


class Ranks:
    """Rank 0's side: starts ranks 1..world-1, sends them each step, and stops them when one fails.

    Args:
        world: the number of ranks, rank 0 (this process) included; at least 2.
        device: the trainer's device ("cpu" -> gloo; "cuda" -> NCCL, rank r on cuda:r).
        timeout_s: how long a collective waits for a rank (a dead one fails it at once).
        launcher: how ranks 1..world-1 start: `ChildRanks()` (the default) or `ray_ranks.RayRanks(options)`.
        shard: "fsdp" shards each model's frozen base over the ranks (module `fsdp`); None: each rank holds it whole.

    Example:
        ranks = Ranks(2, "cpu")
        trainer = Trainer(model, rundir, device="cpu", ranks=ranks)
        trainer.train(groups, config)  # rank 1 starts here and trains half the rows
        ranks.stop()
    """

    rank = 0

    def __init__(self, world: int, device: str, *, timeout_s: float = 1800.0,
                 launcher: RankLauncher | None = None, shard: str | None = None) -> None:
        if world < 2:
            raise ValueError(f"Ranks needs world >= 2, got {world}; train_procs=1 trains in this process alone")
        if shard not in (None, "fsdp"):
            raise ValueError(f"shard must be None or 'fsdp', got {shard!r}")
        self.world = world
        self.shard = shard
        self.device = device
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.lock = threading.Lock()  # one step at a time on the group, whichever model it trains
        self.launcher = launcher if launcher is not None else ChildRanks()
        self._procs: list[RankProcess] = []
        self._commands: Any = None  # the gloo group commands go on
        self._registered: set[str] = set()

    @property
    def running(self) -> bool:
        return bool(self._procs)

    @property
    def processes(self) -> list[RankProcess]:
        """Ranks 1..world-1 (empty before they first start and after a failure)."""
        return list(self._procs)

    def pids(self) -> list[int]:
        """The process ids of ranks 1..world-1 (empty before they first start and after a failure)."""
        return [p.pid for p in self._procs]

    def _start(self) -> None:
        if dist.is_initialized():
            raise RuntimeError("train_procs > 1 starts its own torch.distributed process group, and this process "
                               "already has one (launched by torchrun?); run `art serve --train-procs N` instead")
        store = dist.TCPStore(self.launcher.host, 0, self.world, is_master=True, wait_for_workers=False,
                              timeout=self.timeout)  # listens on every interface
        timeout_s = self.timeout.total_seconds()
        for r in range(1, self.world):
            try:
                self._procs.append(self.launcher.start(r, self.world, store.port, self.device, timeout_s))
            except Exception as exc:
                self._teardown()
                raise RankFailedError(f"trainer rank {r} did not start: {exc}") from exc
        started = time.monotonic()
        slow = started + 60  # then say what is being waited for, once
        while not store.check([f"art/up/{r}" for r in range(1, self.world)]):  # a rank that dies at import: say so
            if (dead := self._dead()) or time.monotonic() > started + timeout_s:
                self._teardown()
                raise RankFailedError(f"trainer {dead or 'ranks did not start in time'} before joining the process "
                                      "group (see their log above)")
            if time.monotonic() > slow:
                slow = float("inf")
                logger.warning("trainer ranks 1..%d have not joined after 60 s (waiting up to %.0f s; as Ray actors, "
                               "are the resources in train_ray_options free on the cluster?)", self.world - 1,
                               timeout_s)
            time.sleep(0.05)
        ours = code_fingerprint()
        for r in range(1, self.world):
            theirs = store.get(f"art/up/{r}").decode()
            if theirs.split(" ")[0] != ours.split(" ")[0]:
                self._teardown()
                raise RankFailedError(f"trainer rank {r} runs other code than rank 0 (rank 0: {ours}; rank {r}: "
                                      f"{theirs}): install the same ART on every node that runs a rank")
        try:
            dist.init_process_group(backend(self.device), store=store, rank=0, world_size=self.world,
                                    timeout=self.timeout)
        except Exception:
            self._teardown()
            raise
        self._commands = dist.new_group(backend="gloo", timeout=IDLE)
        logger.info("trainer ranks 1..%d started (pids %s)", self.world - 1, self.pids())

    def _send(self, command: Register | Step | Logprobs | Stop) -> None:
        dist.broadcast_object_list([command], src=0, group=self._commands)

    def _dead(self) -> str:
        """'rank r exited with code c' for each rank that has exited (waiting a moment for one on its way out)."""
        ended = [(r, p.wait(0.5)) for r, p in enumerate(self._procs, 1)]
        return ", ".join(f"rank {r} {how}" for r, how in ended if how is not None)

    def _teardown(self) -> None:
        for p in self._procs:
            p.end()
        self._procs = []
        self._registered.clear()
        if self._commands is not None:  # the group is ours (`_start` got that far)
            self._commands = None
            dist.destroy_process_group()

    def step(self, trainer: Any, kind: str, step: int, groups: list[TrajectoryGroup],
             config: BaseModel) -> AbstractContextManager[None]:
        """Send step `step` to ranks 1..world-1 (started, and `trainer`'s model registered, first if need
        be); rank 0 runs its share inside the block. An error in the block, or a rank that died, stops
        them and raises (`RankFailedError` when a rank died or failed)."""
        key = str(trainer.rundir.path)
        return self._run(trainer, step, Step(key, kind, step, [g.model_dump_json() for g in groups],
                                             config.model_dump_json()))

    def logprobs(self, trainer: Any, sequences: list[list[int]], step: int | None) -> AbstractContextManager[None]:
        """Ranks 1..world-1 run `trainer.sequences_logprobs(sequences, step)` while rank 0 does in the block
        (a sharded base needs every rank in each forward)."""
        return self._run(trainer, trainer.step, Logprobs(str(trainer.rundir.path), sequences, step))

    def register(self, trainer: Any) -> None:
        """Start ranks 1..world-1 if need be and register `trainer`'s model with them now, not at its first step:
        with `shard="fsdp"` its base is sharded from here on (`Trainer` calls this as it is built)."""
        with self.lock:
            try:
                self._join(trainer)
            except Exception as exc:
                self._failed(exc, f"registering {trainer.rundir.path}")

    def _join(self, trainer: Any) -> None:
        """Under the lock: the ranks up and `trainer`'s model registered with them (its base sharded, with fsdp)."""
        key = str(trainer.rundir.path)
        if key not in self._registered and trainer.policy.root is not None:  # the other shards left with the ranks
            trainer.reload_base()
        if self._procs and any(p.wait(0) is not None for p in self._procs):
            logger.warning("trainer %s since the last step: starting ranks 1..%d again", self._dead(), self.world - 1)
            self._teardown()
        if not self._procs:
            self._start()
        if key not in self._registered:
            self._send(Register(key, trainer.model.model_dump_json(), trainer.rundir, trainer.base_path,
                                trainer.step, self.shard))
            broadcast_params(trainer.policy.params())
            if self.shard == "fsdp":
                trainer.policy.shard_base()
            self._registered.add(key)

    def _failed(self, exc: Exception, what: str) -> None:
        """Stop ranks 1..world-1 after `exc` and raise: `RankFailedError` when a rank died or a collective failed."""
        dead = self._dead()
        self._teardown()
        again = "they start again, from the newest checkpoint, with the next step"
        if self.shard:
            again += " (and rank 0 reads its base again from disk: the other shards left with them)"
        if dead or isinstance(exc, dist.DistError) or "gloo" in str(exc) or "NCCL" in str(exc):
            raise RankFailedError(f"{what} failed on the trainer's ranks ({dead or f'{type(exc).__name__}: {exc}'}); "
                                  f"ranks 1..{self.world - 1} were stopped; {again}") from exc
        logger.warning("%s raised on rank 0: ranks 1..%d stopped; %s", what, self.world - 1, again)
        raise exc

    @contextmanager
    def _run(self, trainer: Any, step: int, command: Step | Logprobs) -> Iterator[None]:
        with self.lock:
            try:
                self._join(trainer)
                self._send(command)
                yield
            except Exception as exc:
                self._failed(exc, f"step {step}")

    def stop(self) -> None:
        """Tell ranks 1..world-1 to exit (killed if they do not within 30 s) and leave the process group."""
        with self.lock:
            if not self._procs:
                return
            try:
                self._send(Stop())
                if None in [p.wait(30) for p in self._procs]:
                    logger.warning("trainer ranks did not stop within 30 s; killing them")
            except Exception:  # noqa: BLE001 - a rank already gone or stuck: killed below
                logger.warning("trainer ranks did not stop cleanly; killing them")
            self._teardown()
