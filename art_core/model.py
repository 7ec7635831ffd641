"""`Model` (a prompted model, for comparison runs) and `TrainableModel` (a LoRA the backend trains)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, cast

import httpx
import openai
from pydantic import BaseModel, Field, PrivateAttr

from .backend import DEFAULT_BEST_METRIC, Backend, Registration, TrainResult
from .config import ModelConfig, SFTConfig, TrainConfig, train_config
from .loggers import Reporter, chosen_loggers, judge_metrics
from .openai_capture import CapturingTransport
from .rundir import check_name
from .samples import note_trainable
from .trajectory import Message, Trajectory, TrajectoryGroup


class Model(BaseModel):
    """A model reached through an OpenAI-compatible endpoint.

    Example:
        judge = Model(name="gpt", project="email", inference_model_name="gpt-4.1-mini",
                      inference_base_url="https://api.openai.com/v1", inference_api_key=key)
        client = judge.openai_client()
    """

    name: str
    project: str = "default"
    base_model: str | None = None
    trainable: bool = False
    inference_base_url: str | None = None
    inference_api_key: str | None = None
    inference_model_name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # metrics loggers (art_core.loggers); None: ART_REPORT_TO. Client-side: never sent to the backend
    report_to: list[str] | None = Field(default=None, exclude=True)

    _backend: Backend | None = PrivateAttr(default=None)
    _reporter: Reporter | None = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        check_name("model name", self.name)
        check_name("project", self.project)
        chosen_loggers(self.report_to)  # an unknown name fails here, not mid-run

    async def register(self, backend: Backend) -> None:
        """Attach the model to a backend, which sets up serving (and for a trainable model, the LoRA)."""
        self._backend = backend
        self.reporter()  # a chosen logger that is not installed fails before any rollout
        reg: Registration = await backend.register(self)
        self.inference_base_url = reg.base_url
        self.inference_api_key = reg.api_key
        self.inference_model_name = reg.served_name
        if self.trainable:  # an app's own chat model that names it gets its sampled ids back (samples.py)
            note_trainable(reg.base_url, reg.served_name, reg.api_key)

    def __getstate__(self) -> dict[Any, Any]:
        # pickled (e.g. into a Ray worker) the model is its endpoint: the backend and loggers stay here
        state: dict[Any, Any] = super().__getstate__()
        if state.get("__pydantic_private__"):
            state["__pydantic_private__"] = {**state["__pydantic_private__"], "_backend": None, "_reporter": None}
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        if self.trainable and self.inference_base_url and self.inference_model_name:  # as register() noted it
            note_trainable(self.inference_base_url, self.inference_model_name, self.inference_api_key or "art")

    def served_name(self, step: int | None = None) -> str:
        name = self.inference_model_name or self.name
        return f"{name}@{step}" if step is not None else name

    def get_inference_name(self) -> str:
        """OpenPipe ART's name for `served_name()`."""
        return self.served_name()

    def _endpoint(self) -> tuple[str, str]:
        if not self.inference_base_url:
            raise RuntimeError(
                f"model {self.name!r} has no inference endpoint: call `await model.register(backend)` "
                "first, or set inference_base_url"
            )
        return self.inference_base_url, self.inference_api_key or "art"

    def openai_client(self, *, timeout: float = 600.0, capture: bool = True, **kwargs: Any) -> openai.AsyncOpenAI:
        """An `openai.AsyncOpenAI` bound to this model's endpoint.

        Inside a rollout (`art_core.capture` or a plugin's decorator) every chat completion made
        with it is recorded in the current trajectory; a trainable model's turns keep their
        sampled token ids and logprobs.
        """
        base_url, api_key = self._endpoint()
        http_client = None
        if capture:
            http_client = httpx.AsyncClient(
                transport=CapturingTransport(trainable=self.trainable), timeout=timeout
            )
        # openai 3.x annotates http_client with httpx2's client; an httpx one works (tests/core/test_capture_client.py)
        return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=cast(Any, http_client),
                                  timeout=timeout, **kwargs)

    def litellm_params(self) -> dict[str, Any]:
        """Keyword arguments for `litellm.completion` / `acompletion` that reach this model."""
        base_url, api_key = self._endpoint()
        return {"model": f"openai/{self.served_name()}", "api_base": base_url, "api_key": api_key}

    def backend(self) -> Backend:
        if self._backend is None:
            raise RuntimeError(f"model {self.name!r} is not registered: call `await model.register(backend)` first")
        return self._backend

    async def log(
        self,
        groups: Iterable[TrajectoryGroup] | Iterable[Trajectory] | None = None,
        split: str = "val",
        *,
        step: int | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write trajectories and their metrics to the run directory (e.g. a validation pass).

        `metrics` (OpenPipe ART's ``model.log(metrics=..., step=...)``) are logged too, with or
        without trajectories: they travel as the metrics of a group with no trajectories and land
        in the history row as ``group/<name>``. What `train` returns (``result.metrics``) is accepted
        as it is: its finite numbers are logged, the rest (lists such as ``skipped_groups``, text)
        is left out.
        """
        groups = _as_groups(groups or [])
        if metrics:
            numbers = {k: v for k, v in metrics.items() if _loggable(v)}
            if numbers:
                groups.append(TrajectoryGroup(metrics=numbers))
        if not groups:
            raise ValueError("model.log() needs trajectories, groups or metrics= to log")
        metrics = await self.backend().log(self, groups, split, step)
        if self.reporter().loggers:
            at = step if step is not None else (await self.get_step() if isinstance(self, TrainableModel) else 0)
            self.reporter().log({**metrics, **judge_metrics(groups)}, split=split, step=at)
        return metrics

    def reporter(self) -> Reporter:
        """The metrics loggers chosen by ``report_to`` / ``ART_REPORT_TO``; ``.close()`` ends their runs."""
        if self._reporter is None:
            self._reporter = Reporter(self, chosen_loggers(self.report_to))
        return self._reporter


class TrainableModel(Model):
    """A LoRA on `base_model` that the backend trains with GRPO (or SFT) and serves.

    Example:
        model = TrainableModel(name="agent-001", project="email", base_model="smollm2-135m")
        await model.register(LocalBackend())
        result = await model.train(groups, config=TrainConfig(learning_rate=1e-5))
    """

    base_model: str
    trainable: bool = True
    config: ModelConfig = Field(default_factory=ModelConfig)

    async def get_step(self) -> int:
        """The newest checkpoint's step (0 before any training)."""
        return await self.backend().get_step(self)

    async def train(
        self,
        groups: Iterable[TrajectoryGroup],
        config: TrainConfig | None = None,
        *,
        verbose: bool = True,
        **fields: Any,
    ) -> TrainResult:
        """One training step with GRPO on `groups`; returns the new step and its metrics.

        `fields` set `TrainConfig` fields (``learning_rate=1e-5``), with or without `config`."""
        groups = list(groups)
        for i, g in enumerate(groups):
            if not isinstance(g, TrajectoryGroup):
                raise TypeError(f"train() item {i} is a {type(g).__name__}; pass TrajectoryGroup objects")
            if g.pending:
                raise ValueError(f"group {i} still has {g.pending} unfinished rollouts; gather it first")
        result = await self.backend().train(self, groups, train_config(config, fields), verbose=verbose)
        self.reporter().log({**result.metrics, **judge_metrics(groups)}, split="train", step=result.step)
        return result

    async def train_sft(
        self,
        data: Iterable[Trajectory] | Iterable[list[Message]],
        config: SFTConfig | None = None,
        *,
        verbose: bool = True,
    ) -> TrainResult:
        """Supervised fine-tuning on the assistant turns of trajectories or plain message lists."""
        trajectories = [d if isinstance(d, Trajectory) else Trajectory(messages=list(d)) for d in data]  # type: ignore[call-arg]
        result = await self.backend().train_sft(self, trajectories, config or SFTConfig(), verbose=verbose)
        self.reporter().log(result.metrics, split="sft", step=result.step)
        return result

    async def list_checkpoints(self) -> list[int]:
        return await self.backend().list_checkpoints(self)

    async def delete_checkpoints(
        self, steps: list[int] | None = None, *, best_checkpoint_metric: str | None = DEFAULT_BEST_METRIC
    ) -> list[int]:
        """Delete the given checkpoints; with `steps` None, every one but the newest and the best.

        The best is the step with the highest `best_checkpoint_metric` in the run's history:
        ``"val/reward_mean"`` is the ``reward_mean`` of the rows that ``model.log(..., split="val")``
        (or an evaluation) wrote for that step. Steps never evaluated cannot be the best; with no
        such rows (or ``best_checkpoint_metric=None``) only the newest stays. Returns the steps deleted.

        Example:
            await model.log(val_groups, split="val")          # after each evaluation
            await model.delete_checkpoints()                  # keeps the best on val and the newest
        """
        return await self.backend().delete_checkpoints(self, steps, best_checkpoint_metric=best_checkpoint_metric)


def _loggable(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _as_groups(items: Iterable[Any]) -> list[TrajectoryGroup]:
    items = list(items)
    if all(isinstance(i, Trajectory) for i in items):
        return [TrajectoryGroup(items)] if items else []
    for i, g in enumerate(items):
        if not isinstance(g, TrajectoryGroup):
            raise TypeError(f"item {i} is a {type(g).__name__}; pass trajectories or TrajectoryGroup objects")
    return items
