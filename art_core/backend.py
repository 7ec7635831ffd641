"""The `Backend` protocol: what a model needs from whatever trains and serves it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .config import SFTConfig, TrainConfig
from .trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from .model import Model


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


@runtime_checkable
class Backend(Protocol):
    """Trains and serves models. `art_train.LocalBackend` and `RemoteBackend` implement it."""

    async def register(self, model: Model) -> Registration: ...

    async def get_step(self, model: Model) -> int: ...

    async def train(
        self, model: Model, groups: list[TrajectoryGroup], config: TrainConfig, *, verbose: bool = True
    ) -> TrainResult: ...

    async def train_sft(
        self, model: Model, trajectories: list[Trajectory], config: SFTConfig, *, verbose: bool = True
    ) -> TrainResult: ...

    async def log(self, model: Model, groups: list[TrajectoryGroup], split: str, step: int | None) -> dict[str, Any]: ...

    async def list_checkpoints(self, model: Model) -> list[int]: ...

    async def delete_checkpoints(self, model: Model, steps: list[int] | None = None) -> list[int]: ...

    async def close(self) -> None: ...
