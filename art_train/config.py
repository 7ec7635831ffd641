"""`BackendConfig`: how the bundled backend runs, shared by `LocalBackend`, `ModelService` and `art serve`."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["BackendConfig"]


class BackendConfig(BaseModel):
    """Where runs live and how models are served and trained; every field has a working default.

    Example:
        LocalBackend(config=BackendConfig(engine="vllm", vllm_python=".venv-vllm/bin/python"))
        # the same as LocalBackend(engine="vllm", vllm_python=".venv-vllm/bin/python")
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | os.PathLike[str] | None = Field(
        None, description="Run-directory root (default ART_HOME or ./.art)."
    )
    engine: Literal["transformers", "vllm"] | None = Field(
        None, description="Inference engine for every model; None uses each model's config.engine."
    )
    device: str | None = Field(None, description="Torch device for the trainer and the transformers engine.")
    vllm_python: str | None = Field(
        None, description="Interpreter that runs vLLM (default ART_VLLM_PYTHON, else this one)."
    )
    engine_dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(
        None,
        description=(
            "Weights' dtype in the transformers engine; None uses the model's config.dtype, whose 'auto' is "
            "bfloat16 on a GPU or on a CPU with native bfloat16 (AVX512-BF16, AMX; ~1.5x faster there than "
            "float32) and float32 on other CPUs. The trainer is unaffected."
        ),
    )
    sync_tolerance: float | None = Field(
        None,
        gt=0,
        description=(
            "Largest allowed |engine logprob - trainer logprob| on the weight-sync probe; None uses the "
            "engine's own (vLLM) or 2e-3 at full precision, 0.1 at half."
        ),
    )
    sync_probe_tokens: int = Field(
        256,
        ge=0,
        description=(
            "Tokens of each step's trained sequences added to the weight-sync probe, on which the engine's "
            "move from the previous checkpoint (and step 0) must match the trainer's. Each is run under three "
            "checkpoints on both sides: on a CPU with short steps that can cost as much as the step itself, "
            "so lower it there (0: the fixed probe and the weight identity only)."
        ),
    )
    port: int = Field(0, ge=0, le=65535, description="Port of the OpenAI endpoint; 0 picks a free one.")
    train_procs: int = Field(
        1,
        ge=1,
        description=(
            "Trainer ranks: 1 trains in the service's process; N > 1 adds N-1 ranks (child processes, or Ray "
            "actors: `train_launcher`) in one torch.distributed group (gloo on CPU, NCCL on CUDA, rank r on "
            "cuda:r) that share each step's rows and sum their LoRA gradients (docs/training.md, "
            "'Multi-process trainer')."
        ),
    )
    train_launcher: Literal["local", "ray"] = Field(
        "local",
        description=(
            "How ranks 1..N-1 start with `train_procs` = N > 1: 'local' child processes of this one, or 'ray': "
            "each rank a Ray actor on the node Ray places it, joining rank 0's group at rank 0's node IP (calls "
            "ray.init() if Ray is not initialised; RAY_ADDRESS joins a cluster). Rank 0 stays in this process. "
            "Ranks on other nodes read rank 0's checkpoints: the run directory (`path`) must be on a filesystem "
            "every node sees. See docs/scaling.md."
        ),
    )
    train_ray_options: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Options for each trainer rank's Ray actor, passed to `.options()` (Ray's defaults otherwise): "
            "e.g. {'num_gpus': 1}, or {'num_cpus': 2, 'resources': {'trainer': 1}} to place ranks on nodes that "
            "offer that resource. A rank takes num_cpus torch threads when given, else its node's cores // N."
        ),
    )
    train_shard: Literal["fsdp"] | None = Field(
        None,
        description=(
            "'fsdp': with train_procs > 1, each rank keeps 1/train_procs of the frozen base weights (torch's FSDP2, "
            "`fully_shard` per decoder layer), gathered layer by layer in each forward and backward, for a base "
            "that does not fit one device; the LoRA stays whole on every rank. None: every rank holds the whole "
            "base (docs/scaling.md, 'Multi-process trainer')."
        ),
    )
    replicas: int = Field(
        1,
        ge=1,
        description=(
            "Engine replicas per base model behind the one endpoint, each its own process (the transformers "
            "engine in a worker process, local or in a Ray actor: `replica_launcher`; or a vLLM server); 1 "
            "serves from one engine as before. "
            "See docs/serving.md, 'Replicas'."
        ),
    )
    replica_launcher: Literal["local", "ray"] = Field(
        "local",
        description=(
            "How replicas start with `replicas` > 1: 'local' processes on this machine, or 'ray': each replica a "
            "Ray actor that runs the embedded engine's worker process on the node Ray places it (calls "
            "ray.init() if Ray is not initialised; RAY_ADDRESS joins a cluster). Transformers engine only. "
            "See docs/scaling.md."
        ),
    )
    replica_devices: list[str] | None = Field(
        None,
        description=(
            "The GPUs each engine replica's process sees, one CUDA_VISIBLE_DEVICES value per replica (e.g. "
            "['4,5', '6,7'] for two vLLM replicas of tensor_parallel_size 2 beside trainer ranks on GPUs 0-3, "
            "which use cuda:0..N-1 of the devices the server sees; or ['4,5,6,7'] for one vLLM server). With "
            "replicas=1 only the vLLM engine has a process of its own. None: every replica sees the server's "
            "devices. With replica_launcher='ray', Ray assigns the GPUs (replica_ray_options={'num_gpus': k})."
        ),
    )
    replica_ray_options: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Options for each replica's Ray actor, passed to `.options()` over the default "
            "{'num_cpus': 1, 'scheduling_strategy': 'SPREAD'}: e.g. {'num_gpus': 1}, or "
            "{'num_cpus': 0, 'resources': {'inference': 1}} to place replicas on nodes that offer that resource."
        ),
    )

    @model_validator(mode="after")
    def _devices_per_replica(self) -> BackendConfig:
        devices = self.replica_devices
        if devices is None:
            return self
        if self.replica_launcher == "ray":
            raise ValueError("replica_devices sets the GPUs of locally started replicas; with replica_launcher='ray' "
                             "Ray assigns them: give replica_ray_options={'num_gpus': k} instead")
        if len(devices) != self.replicas:
            raise ValueError(f"replica_devices has {len(devices)} entries for replicas={self.replicas}: give one "
                             "CUDA_VISIBLE_DEVICES value per replica, e.g. ['4,5', '6,7']")
        for value in devices:
            if not value or any(c.isspace() for c in value):
                raise ValueError(f"replica_devices entry {value!r} is not a CUDA_VISIBLE_DEVICES value: device "
                                 "indices or UUIDs joined by commas, without spaces, e.g. '4,5'")
        return self

    @model_validator(mode="after")
    def _shard_needs_ranks(self) -> BackendConfig:
        if self.train_shard is not None and self.train_procs < 2:
            raise ValueError(f"train_shard={self.train_shard!r} shards the base over the trainer's ranks and needs "
                             f"train_procs >= 2, got train_procs={self.train_procs}; set train_procs or drop train_shard")
        return self
