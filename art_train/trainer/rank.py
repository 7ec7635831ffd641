"""Ranks 1..N-1 of the multi-process trainer: join rank 0's group, then follow its commands (`distributed`).

Rank 0 (`distributed.Ranks`) starts each as a child process running `main`, with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set as torchrun sets them (and the device and timeout rank 0 uses), or as a
Ray actor that calls `serve_rank` with the same values (`ray_ranks`).
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from art_core import TrainableModel, TrajectoryGroup

from .distributed import (
    IDLE,
    Logprobs,
    Register,
    Step,
    Stop,
    Worker,
    backend,
    broadcast_params,
    code_fingerprint,
    rank_device,
)
from .trainer import STEPS, Trainer

__all__ = ["main", "serve_rank"]


def serve_rank(rank: int, world: int, addr: str, port: int, device: str, timeout_s: float) -> None:
    """A worker rank's life: join the group whose store rank 0 serves at `addr`:`port`, then follow rank 0's
    commands until `Stop` (or rank 0 is gone). `device` is this rank's own (`rank_device`)."""
    logging.basicConfig(level=logging.WARNING, format=f"[train rank {rank}] %(levelname)s %(name)s: %(message)s")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
    store.set(f"art/up/{rank}", code_fingerprint())  # rank 0 refuses other code (`Ranks._start`)
    trainers: dict[str, Trainer] = {}
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    dist.init_process_group(backend(device), store=store, rank=rank, world_size=world, timeout=timeout)
    commands = dist.new_group(backend="gloo", timeout=IDLE)
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=commands)
        command = box[0]
        if isinstance(command, Stop):
            break
        if isinstance(command, Register):
            model = TrainableModel.model_validate_json(command.model)
            trainer = Trainer(model, command.rundir, base_path=command.base_path, device=device,
                              ranks=Worker(rank, world, command.shard))
            if trainer.step != command.step:
                raise RuntimeError(f"rank {rank}: the newest checkpoint of {command.key} is {trainer.step}, "
                                   f"rank 0 is at {command.step}")
            broadcast_params(trainer.policy.params())
            if command.shard == "fsdp":
                trainer.policy.shard_base()
            trainers[command.key] = trainer
        elif isinstance(command, Step):
            groups = [TrajectoryGroup.model_validate_json(g) for g in command.groups]
            config = STEPS[command.kind][0].model_validate_json(command.config)
            trainers[command.key].follow(command.kind, command.step, groups, config)  # type: ignore[arg-type]
        elif isinstance(command, Logprobs):
            trainers[command.key].sequences_logprobs(command.sequences, command.step)  # rank 0 keeps the result
        else:
            raise TypeError(f"rank {rank}: unknown command {command!r}")
    dist.destroy_process_group()


def main() -> None:
    """A child process's entry (`distributed.ChildRanks`): torchrun's environment says where it sits."""
    rank = int(os.environ["RANK"])
    serve_rank(rank, int(os.environ["WORLD_SIZE"]), os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
               rank_device(os.environ["ART_TRAIN_DEVICE"], rank), float(os.environ["ART_TRAIN_TIMEOUT_S"]))
