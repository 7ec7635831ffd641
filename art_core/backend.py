"""The `Backend` protocol: what a model needs from whatever trains and serves it.

A backend is handed the model itself; it reads the model's names and, to send it over the wire,
its serialised form (`ModelLike`). So this module does not import `model.py`: `Model` depends on
`Backend`, never the other way round.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .config import SFTConfig, TrainConfig
from .trajectory import Trajectory, TrajectoryGroup

DEFAULT_BEST_METRIC = "val/reward_mean"


class Registration(BaseModel):
    """What `register` hands back: where to send chat completions for this model."""

    base_url: str  # OpenAI-compatible root, ending in /v1
    api_key: str = "art"
    served_name: str  # name to put in `model=`; `name@step` pins a checkpoint
    step: int = 0


class TrainResult(BaseModel):
    """The outcome of one `train` or `train_sft` call."""

    step: int
    metrics: dict[str, Any] = Field(default_factory=dict)


class ModelLike(Protocol):
    """What a backend reads from the model it is given (`art_core.Model` and `TrainableModel` are such)."""

    @property
    def name(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def base_model(self) -> str | None: ...
    @property
    def trainable(self) -> bool: ...

    def model_dump(self, *, mode: str = "python", exclude_unset: bool = False) -> dict[str, Any]: ...


@runtime_checkable
class Backend(Protocol):
    """Trains and serves models. `art_train.LocalBackend` and `RemoteBackend` implement it."""

    async def register(self, model: ModelLike) -> Registration: ...

    async def get_step(self, model: ModelLike) -> int: ...

    async def train(
        self, model: ModelLike, groups: list[TrajectoryGroup], config: TrainConfig, *, verbose: bool = True
    ) -> TrainResult: ...

    async def train_sft(
        self, model: ModelLike, trajectories: list[Trajectory], config: SFTConfig, *, verbose: bool = True
    ) -> TrainResult: ...

    async def log(
        self, model: ModelLike, groups: list[TrajectoryGroup], split: str, step: int | None
    ) -> dict[str, Any]: ...

    async def list_checkpoints(self, model: ModelLike) -> list[int]: ...

    async def delete_checkpoints(
        self,
        model: ModelLike,
        steps: list[int] | None = None,
        *,
        best_checkpoint_metric: str | None = DEFAULT_BEST_METRIC,
    ) -> list[int]:
        """Delete `steps`, or (None) every checkpoint but the newest and the best by `best_checkpoint_metric`."""
        ...

    async def close(self) -> None: ...
