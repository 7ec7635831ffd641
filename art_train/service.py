"""The model registry behind both `art serve` and `LocalBackend`.

It owns, per registered model: the engine that serves it (one engine per base model, shared), the
`Trainer`, its `Swap` (the served step and everything between a trained step and serving it) and the
gate that holds the model's inference while a step trains (engines have none of their own).

A synchronous training step (the default): hold (new requests wait, those in flight finish) -> train
-> the swap (publish, load, weight-sync check, serve, retain; see `swap`) -> resume. In asynchronous
mode (``TrainConfig(mode="async")``) nothing is held: requests keep sampling from the served step
while the next one trains, and the swap replaces it between requests. If the check fails, the step
fails loudly and the previous step stays served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from art_core import (
    Model,
    RunDir,
    SFTConfig,
    TrainableModel,
    TrainConfig,
    TrainResult,
    Trajectory,
    TrajectoryGroup,
)
from art_core.metrics import group_metrics
from art_core.rundir import art_home, check_name

from .config import BackendConfig
from .engines import bundled_engine
from .engines.base import ChatRequest, Engine, EngineError, Sleeps
from .errors import ServiceError, WeightSyncError
from .gate import Gate
from .malloc import trim_malloc, tune_malloc
from .swap import Swap, sync_tolerance
from .validate import check_train_groups, vocab_size, with_model_defaults

__all__ = ["Gate", "ModelService", "ServiceError", "WeightSyncError", "split_served_name"]  # errors, Gate: re-exported

logger = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], None]


def split_served_name(served: str) -> tuple[str, int | None]:
    """``"agent@7"`` -> ("agent", 7); ``"agent"`` -> ("agent", None)."""
    name, sep, step = served.rpartition("@")
    if not sep:
        return served, None
    if not step.isdigit():
        raise ServiceError(f"model {served!r}: the part after '@' must be a step number, e.g. {name}@3", status=404,
                           type="not_found_error")
    return name, int(step)


def _launch_custom(make: Callable[[Model], Engine], model: Model) -> Callable[[int], Awaitable[Engine]]:
    """Replica i of a custom engine (`make_engine`): a new one, started."""

    async def launch(index: int) -> Engine:
        engine = make(model)
        await engine.start()
        return engine

    return launch


@dataclass
class _Entry:
    model: Model
    engine: Engine
    trainer: Any = None  # a Trainer (seen by the swap as a `TrainerSide`)
    rundir: RunDir | None = None
    swap: Swap | None = None  # trainable models only
    gate: Gate = field(default_factory=Gate)
    train_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def step(self) -> int | None:
        """The step new requests get (None: an untrainable model, served as the bare base)."""
        return self.swap.step if self.swap is not None else None


class ModelService:
    """Registers models, routes chat completions to their engine, trains and swaps adapters.

    Args:
        config: the backend's `BackendConfig` (run-directory root, engine, device, dtype, tolerance).
        make_engine: builds the engine for a model instead of the bundled ones (called once per base
            model, then started; once per replica with `config.replicas` > 1); tests pass a fake that wraps
            a Python function (tests/support).

    Example:
        service = ModelService(BackendConfig(path="/data/art"))
        app = create_app(service)
    """

    def __init__(self, config: BackendConfig | None = None, *, make_engine: Callable[[Model], Engine] | None = None,
                 **options: Any) -> None:
        self.config = config if config is not None else BackendConfig(**options)
        if config is not None and options:
            raise TypeError(f"pass either a BackendConfig or its fields ({sorted(options)}), not both")
        self._make_engine = make_engine
        self._entries: dict[str, _Entry] = {}
        self._engines: dict[tuple[str, str, str], Engine] = {}
        self._register_lock = asyncio.Lock()
        tune_malloc()  # a long run's RSS then stays near its working set (art_train/malloc.py)
        self._ranks: Any = None  # trainer.distributed.Ranks with train_procs > 1, made with the first trainer

    # -- registration --------------------------------------------------------------------------
    async def _engine_for(self, model: Model) -> Engine:
        config = getattr(model, "config", None)
        replicas = self.config.replicas
        if (make := self._make_engine) is not None:
            key = (model.base_model or "", "custom", "")
            build: Callable[[], Engine] = lambda: make(model)  # noqa: E731
            launch = _launch_custom(make, model)
        else:
            from .models import resolve_base_model

            kind = self.config.engine or getattr(config, "engine", None) or "transformers"
            path = await asyncio.to_thread(resolve_base_model, model.base_model or "")
            dtype = (self.config.engine_dtype if kind == "transformers" else None) or getattr(config, "dtype", None) or "auto"
            key = (str(path), kind, dtype)
            devices = self.config.replica_devices
            one_env = {"CUDA_VISIBLE_DEVICES": devices[0]} if devices and replicas == 1 else None
            build = lambda: bundled_engine(kind, path, config, self.config.device, dtype,  # noqa: E731
                                           self.config.vllm_python, one_env)
            if replicas > 1 and self.config.replica_launcher == "ray":
                if kind != "transformers":
                    raise ServiceError(f"replica_launcher='ray' runs the embedded (transformers) engine's worker; "
                                       f"got engine {kind!r}: use replica_launcher='local' for vLLM replicas")
                from .serving import ray_launcher

                launch = ray_launcher(path, config, self.config.device, dtype, self.config.replica_ray_options)
            elif replicas > 1:
                from .serving import local_launcher

                launch = local_launcher(kind, path, config, self.config.device, dtype, self.config.vllm_python,
                                        replicas, devices)
        if replicas > 1:
            from .serving import ReplicaSet

            build = lambda: ReplicaSet(launch, replicas, name=model.base_model or "engine")  # noqa: E731
        if key not in self._engines:
            try:
                engine = build()
                await engine.start()  # a replica set builds its engines here
            except ValueError as exc:
                raise ServiceError(str(exc)) from exc
            self._engines[key] = engine
        engine = self._engines[key]
        wanted = getattr(config, "vllm", None)
        if wanted is not None and getattr(engine, "settings", wanted) != wanted:  # a shared vLLM engine
            logger.warning("model %s: its vllm settings are not applied; the vLLM engine for %s was started with "
                           "%s by the model registered on it first", model.name, model.base_model,
                           engine.settings.model_dump(exclude_defaults=True))  # type: ignore[attr-defined]
        return engine

    async def register(self, model: Model) -> _Entry:
        """Set up serving (and for a trainable model, its trainer and newest checkpoint)."""
        async with self._register_lock:
            entry = self._entries.get(model.name)
            if entry is not None:
                if entry.model.base_model != model.base_model:
                    raise ServiceError(
                        f"model {model.name!r} is already registered on {entry.model.base_model!r}, not "
                        f"{model.base_model!r}; pick another name", status=409, type="conflict_error")
                return entry
            if not model.base_model:
                raise ServiceError(f"model {model.name!r} has no base_model; set it to a Hugging Face id, "
                                   "a local folder or 'smollm2-135m'")
            trainable = isinstance(model, TrainableModel) or model.trainable
            if trainable:
                try:
                    model = await asyncio.to_thread(with_model_defaults, model)
                except ValueError as exc:
                    raise ServiceError(str(exc)) from exc
            try:
                engine = await self._engine_for(model)
            except FileNotFoundError as exc:
                raise ServiceError(str(exc), status=404, type="not_found_error") from exc
            entry = _Entry(model=model, engine=engine)
            if trainable:
                assert isinstance(model, TrainableModel)
                entry.rundir = RunDir(model.project, model.name, self.config.path)
                entry.rundir.write_model(model.model_dump(mode="json"))
                from .trainer import Trainer  # torch: only once a trainable model registers

                entry.trainer = await asyncio.to_thread(Trainer, model, entry.rundir, device=self.config.device,
                                                        ranks=self._trainer_ranks())
                # a step journalled by a process that died mid-step is finished now, from its saved
                # trajectories: the served step is then the newest complete one and get_step() is right
                resumed = await asyncio.to_thread(entry.trainer.resume_pending)
                if resumed is not None:
                    logger.warning("%s: finished step %d, interrupted before this process started", model.name,
                                   resumed.step)
                entry.trainer.save_in_background = True  # the swap waits for the write only where it reads the folder
                tolerance = sync_tolerance(engine, model.config, self.config.device, self.config.sync_tolerance)
                entry.swap = Swap.for_trainer(model, entry.rundir, engine, entry.trainer, entry.gate, tolerance,
                                              self.config.sync_probe_tokens)
                await entry.swap.load_and_verify(int(entry.trainer.step))
                entry.swap.step = int(entry.trainer.step)
            self._entries[model.name] = entry
            logger.info("registered %s (%s) at step %s", model.name, model.base_model, entry.step)
            return entry

    def _trainer_ranks(self) -> Any:
        """The trainer's ranks 1..N-1 (one group for every model; started with the first step), or None."""
        if self.config.train_procs > 1 and self._ranks is None:
            import torch

            from .trainer.distributed import RankLauncher, Ranks

            device = self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")
            launcher: RankLauncher | None = None  # child processes
            if self.config.train_launcher == "ray":
                from .trainer.ray_ranks import RayRanks

                launcher = RayRanks(self.config.train_ray_options)
            self._ranks = Ranks(self.config.train_procs, device, launcher=launcher,
                                shard=self.config.train_shard)
        return self._ranks

    def entry(self, name: str) -> _Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise ServiceError(
                f"model {name!r} is not registered here; registered: {sorted(self._entries)}. "
                "Register it first (`await model.register(backend)`)", status=404, type="not_found_error")
        return entry

    async def restore(self, name: str) -> None:
        """Register `name` from its run directory's model.json if this process has not seen it yet (after a
        restart, clients reconnect by name). Nothing happens when it is unknown or ambiguous."""
        if name in self._entries:
            return
        try:
            check_name("model name", name)
        except ValueError:
            return
        found = sorted(art_home(self.config.path).glob(f"*/models/{name}/model.json"))
        if len(found) != 1:
            return
        data = json.loads(found[0].read_text())
        logger.info("restoring %s from %s", name, found[0].parent)
        await self.register(TrainableModel.model_validate(data))

    def served_names(self) -> list[str]:
        return sorted(self._entries)

    def replica_sets(self) -> list[Any]:
        """The `ReplicaSet`s serving models here (none with `BackendConfig.replicas` = 1)."""
        from .serving import ReplicaSet

        return [e for e in self._engines.values() if isinstance(e, ReplicaSet)]

    # -- inference -----------------------------------------------------------------------------
    async def _adapter_for(self, entry: _Entry, pinned: int | None) -> tuple[str | None, int | None]:
        if entry.swap is None:
            if pinned is not None:
                raise ServiceError(f"model {entry.model.name!r} is not trainable; it has no steps to pin",
                                   status=404, type="not_found_error")
            return None, None
        step = entry.swap.step if pinned is None else pinned
        assert step is not None
        return await entry.swap.ensure_loaded(step), step

    async def _admit(self, served: str, request: ChatRequest) -> tuple[_Entry, int | None]:
        """Through the gate, with the adapter of the served (or pinned) step set on `request`: the request
        samples under that one adapter from its first token to its last. The caller must `gate.leave(step)`."""
        name, pinned = split_served_name(served)
        await self.restore(name)
        entry = self.entry(name)
        await entry.gate.enter()
        try:
            request.adapter, step = await self._adapter_for(entry, pinned)
        except BaseException:
            entry.gate.leave()
            raise
        entry.gate.use(step)
        request.model = served
        return entry, step

    async def chat(self, served: str, request: ChatRequest) -> dict[str, Any]:
        entry, step = await self._admit(served, request)
        try:
            body = await entry.engine.chat(request)
            if step is not None:
                body["art_step"] = step
            return body
        finally:
            entry.gate.leave(step)

    async def chat_stream(self, served: str, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        """Checks the name before the first chunk (so errors are HTTP errors), then streams."""
        entry, step = await self._admit(served, request)

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            try:
                async for chunk in entry.engine.chat_stream(request):
                    if step is not None:
                        chunk["art_step"] = step
                    yield chunk
            finally:
                entry.gate.leave(step)

        return chunks()

    # -- training ------------------------------------------------------------------------------
    def check_trainable(self, name: str) -> None:
        """ServiceError (404 or 400) unless `name` is a registered trainable model."""
        self._trainable(name)

    def _trainable(self, name: str) -> _Entry:
        entry = self.entry(name)
        if entry.trainer is None:
            raise ServiceError(f"model {name!r} is not a TrainableModel; only trainable models train")
        return entry

    def check_train(self, name: str, groups: list[TrajectoryGroup]) -> _Entry:
        """The trainable entry for `name`, after checking `groups` can be trained (a 400 naming the problem if not)."""
        entry = self._trainable(name)
        try:
            check_train_groups(groups, vocab_size(entry.trainer))
        except ValueError as exc:
            raise ServiceError(str(exc)) from exc
        return entry

    async def _train(self, entry: _Entry, run: Callable[[Any, Progress], TrainResult], progress: Progress | None,
                     step_id: str | None, hold: bool = True) -> TrainResult:
        """Train one step with `run`, then the swap. With `hold` (sync mode) inference waits from before the
        step until the new adapter is served; without, it goes on under the old one. An engine in sleep mode
        (`Sleeps`, vLLM's `enable_sleep_mode`) sleeps while the step trains and wakes before the swap loads the
        new adapter; its model's requests then wait at the gate in either mode. A call repeated with the same
        `step_id` (a client retrying across a restart) returns its step instead of training again."""
        done = entry.trainer.completed(step_id) if step_id else None
        if done is not None and entry.step is not None and done.step <= entry.step:
            return done
        assert entry.swap is not None
        report = progress or (lambda _: None)
        engine = entry.engine
        sleeper = engine if isinstance(engine, Sleeps) and engine.sleep_mode else None
        hold = hold or sleeper is not None  # an engine asleep serves nothing
        async with entry.train_lock:
            if hold:
                report({"type": "progress", "phase": "hold", "done": 0, "total": 1})
                await entry.gate.hold()
            try:
                if sleeper is not None:
                    await sleeper.sleep()
                try:
                    result: TrainResult = await asyncio.to_thread(
                        run, entry.trainer, lambda event: report({"type": "progress", **event}))
                    await asyncio.to_thread(trim_malloc)  # the step's freed activations go back to the OS
                finally:
                    if sleeper is not None:
                        await sleeper.wake_up()
                report({"type": "progress", "phase": "swap", "done": 0, "total": 1})
                swap = await entry.swap.after_step(result.step, result.metrics)
                report({"type": "progress", "phase": "swap", "done": 1, "total": 1})
                return TrainResult(step=result.step, metrics={**result.metrics, **swap})
            finally:
                if hold:
                    entry.gate.resume()

    async def train(self, name: str, groups: list[TrajectoryGroup], config: TrainConfig,
                    progress: Progress | None = None, step_id: str | None = None) -> TrainResult:
        """One GRPO step (see `_train` for `step_id`)."""
        entry = self.check_train(name, groups)
        return await self._train(entry, lambda t, p: t.train(groups, config, progress=p, step_id=step_id), progress,
                                 step_id, hold=config.mode == "sync")

    async def train_sft(self, name: str, trajectories: list[Trajectory], config: SFTConfig,
                        progress: Progress | None = None, step_id: str | None = None) -> TrainResult:
        entry = self.check_train(name, [TrajectoryGroup(trajectories)])
        return await self._train(entry, lambda t, p: t.train_sft(trajectories, config, progress=p, step_id=step_id),
                                 progress, step_id)

    async def get_step(self, name: str) -> int:
        return self.entry(name).step or 0

    async def log(self, name: str, groups: list[TrajectoryGroup], split: str, step: int | None) -> dict[str, Any]:
        entry = self._trainable(name)
        assert entry.rundir is not None
        step = (entry.step or 0) if step is None else step
        try:
            entry.rundir.trajectories_path(split, step)
        except ValueError as exc:  # the split names a folder: no '..' or '/'
            raise ServiceError(str(exc)) from exc
        metrics = group_metrics(groups)
        await asyncio.to_thread(entry.rundir.write_trajectories, split, step, groups)
        await asyncio.to_thread(entry.rundir.append_history, {"step": step, "split": split, "time": time.time(), **metrics})
        return metrics

    async def list_checkpoints(self, name: str) -> list[int]:
        rundir = self._trainable(name).rundir
        return rundir.checkpoint_steps() if rundir is not None else []

    async def delete_checkpoints(self, name: str, steps: list[int] | None = None,
                                 best_checkpoint_metric: str | None = None) -> list[int]:
        """Delete `steps`, or (None) all but the newest and the best by `best_checkpoint_metric`."""
        swap = self._trainable(name).swap
        assert swap is not None
        try:
            return await swap.delete_checkpoints(steps, best_checkpoint_metric)
        except ValueError as exc:
            raise ServiceError(str(exc)) from exc

    async def close(self) -> None:
        for trainer in [e.trainer for e in self._entries.values() if e.trainer is not None]:
            await asyncio.to_thread(trainer.close)  # the last checkpoint on disk first
        if self._ranks is not None:
            await asyncio.to_thread(self._ranks.stop)
        for engine in self._engines.values():
            try:
                await engine.stop()
            except EngineError:
                logger.exception("stopping an engine failed")
        self._engines.clear()
        self._entries.clear()
