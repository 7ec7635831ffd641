"""The model registry behind both `art serve` and `LocalBackend`.

It owns, per registered model: the engine that serves it (one engine per base model, shared), the
`Trainer`, the served step, and the one gate that holds the model's inference while a step trains
(engines have none of their own). A training step goes: hold (new requests wait, those in flight
finish) -> train -> load the new adapter into the engine -> weight-sync check (engine logprobs on a
probe == trainer logprobs for that checkpoint) -> serve the new step -> checkpoint retention
(`ModelConfig.retain_checkpoints`) -> resume. If the check fails, the step fails loudly and the
previous step stays served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from art_core import (
    Model,
    ModelConfig,
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
from .engines.base import ChatRequest, Engine, EngineError

__all__ = ["Gate", "ModelService", "ServiceError", "WeightSyncError", "split_served_name"]

logger = logging.getLogger(__name__)

DRIFT_WARNING = 0.1  # mean |sampler - trainer| logprob above which a full-precision engine's step warns

Progress = Callable[[dict[str, Any]], None]

_PROBE = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Name three prime numbers and say why each is prime."},
    {"role": "assistant", "content": "2, 3 and 5: each has exactly two divisors, one and itself."},
]


class ServiceError(RuntimeError):
    """A request the service cannot serve; `status` and `type` become the HTTP error."""

    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.type = type


class WeightSyncError(ServiceError):
    """The engine does not serve the weights the trainer just saved."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=500, type="weight_sync_error")


def split_served_name(served: str) -> tuple[str, int | None]:
    """``"agent@7"`` -> ("agent", 7); ``"agent"`` -> ("agent", None)."""
    name, sep, step = served.rpartition("@")
    if not sep:
        return served, None
    if not step.isdigit():
        raise ServiceError(f"model {served!r}: the part after '@' must be a step number, e.g. {name}@3", status=404,
                           type="not_found_error")
    return name, int(step)


class Gate:
    """Admission control for one model's inference: `hold` makes new requests wait and drains the rest."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._held_at: float | None = None  # for held_seconds (art serve's /metrics)
        self._held_total = 0.0

    async def enter(self) -> None:
        while not self._open.is_set():
            await self._open.wait()
        self._inflight += 1
        self._idle.clear()

    def leave(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    async def hold(self) -> None:
        self._held_at = self._held_at or time.monotonic()
        self._open.clear()
        await self._idle.wait()

    def resume(self) -> None:
        if self._held_at is not None:
            self._held_total += time.monotonic() - self._held_at
            self._held_at = None
        self._open.set()

    def held_seconds(self) -> float:
        """Seconds spent held, the current hold included."""
        return self._held_total + (time.monotonic() - self._held_at if self._held_at is not None else 0.0)

    @property
    def held(self) -> bool:
        return not self._open.is_set()


@dataclass
class _Entry:
    model: Model
    engine: Engine
    trainer: Any = None
    rundir: RunDir | None = None
    step: int | None = None
    gate: Gate = field(default_factory=Gate)
    train_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loaded: set[int] = field(default_factory=set)


class ModelService:
    """Registers models, routes chat completions to their engine, trains and swaps adapters.

    Args:
        config: the backend's `BackendConfig` (run-directory root, engine, device, dtype, tolerance).
        make_engine: builds the engine for a model instead of the bundled ones (called once per base
            model, then started); tests pass a fake that wraps a Python function (tests/support).

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

    # -- registration --------------------------------------------------------------------------
    def _make_trainer(self, model: TrainableModel, rundir: RunDir) -> Any:
        from .trainer import Trainer

        return Trainer(model, rundir, device=self.config.device)

    async def _engine_for(self, model: Model) -> Engine:
        config = getattr(model, "config", None)
        if self._make_engine is not None:
            key = (model.base_model or "", "custom", "")
            build: Callable[[], Engine] = lambda: self._make_engine(model)  # noqa: E731
        else:
            from .models import resolve_base_model

            kind = self.config.engine or getattr(config, "engine", None) or "transformers"
            path = await asyncio.to_thread(resolve_base_model, model.base_model or "")
            dtype = (self.config.engine_dtype if kind == "transformers" else None) or getattr(config, "dtype", "auto")
            key = (str(path), kind, dtype)
            build = lambda: self._bundled_engine(kind, path, config, dtype)  # noqa: E731
        if key not in self._engines:
            engine = build()
            await engine.start()
            self._engines[key] = engine
        return self._engines[key]

    def _bundled_engine(self, kind: str, path: Path, model_config: Any, dtype: str) -> Engine:
        if kind == "transformers":
            from .engines.transformers_engine import TransformersEngine

            return TransformersEngine(path, model_config=model_config, device=self.config.device, dtype=dtype)
        if kind == "vllm":
            from .engines.vllm_engine import VLLMEngine

            return VLLMEngine(path, model_config=model_config, python=self.config.vllm_python)
        raise ServiceError(f"unknown engine {kind!r}; use 'transformers' or 'vllm'")

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
                model = await asyncio.to_thread(self._with_model_defaults, model)
            try:
                engine = await self._engine_for(model)
            except FileNotFoundError as exc:
                raise ServiceError(str(exc), status=404, type="not_found_error") from exc
            entry = _Entry(model=model, engine=engine)
            if trainable:
                assert isinstance(model, TrainableModel)
                entry.rundir = RunDir(model.project, model.name, self.config.path)
                entry.rundir.write_model(model.model_dump(mode="json"))
                entry.trainer = await asyncio.to_thread(self._make_trainer, model, entry.rundir)
                # a step journalled by a process that died mid-step is finished now, from its saved
                # trajectories: the served step is then the newest complete one and get_step() is right
                resumed = await asyncio.to_thread(entry.trainer.resume_pending)
                if resumed is not None:
                    logger.warning("%s: finished step %d, interrupted before this process started", model.name,
                                   resumed.step)
                entry.step = int(entry.trainer.step)
                await self._load_and_verify(entry, entry.step)
            self._entries[model.name] = entry
            logger.info("registered %s (%s) at step %s", model.name, model.base_model, entry.step)
            return entry

    @staticmethod
    def _with_model_defaults(model: Model) -> TrainableModel:
        """A copy of `model` as a TrainableModel whose config has the base model's alias defaults in every
        field the user left unset (`apply_model_defaults`); the user's object is not changed."""
        from .models import apply_model_defaults

        if not isinstance(model, TrainableModel):
            model = TrainableModel.model_validate(model.model_dump(exclude_unset=True))
        try:
            config = apply_model_defaults(model.config, model.base_model)
        except ValueError as exc:  # pydantic's ValidationError too: an alias whose defaults do not validate
            raise ServiceError(f"model {model.name!r}: the defaults of base model {model.base_model!r} are invalid: "
                               f"{exc}; fix its ModelSpec or set the fields in ModelConfig") from exc
        return model.model_copy(update={"config": config})

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

    # -- inference -----------------------------------------------------------------------------
    def adapter_name(self, entry: _Entry, step: int) -> str:
        return f"{entry.model.name}@{step}"

    async def _adapter_for(self, entry: _Entry, pinned: int | None) -> tuple[str | None, int | None]:
        if entry.trainer is None:
            if pinned is not None:
                raise ServiceError(f"model {entry.model.name!r} is not trainable; it has no steps to pin",
                                   status=404, type="not_found_error")
            return None, None
        step = entry.step if pinned is None else pinned
        assert step is not None and entry.rundir is not None
        if step not in entry.loaded:
            path = entry.rundir.checkpoint_path(step)
            if not path.exists():
                raise ServiceError(
                    f"model {entry.model.name!r} has no checkpoint {step}; steps: {entry.rundir.checkpoint_steps()}",
                    status=404, type="not_found_error")
            await entry.engine.load_adapter(self.adapter_name(entry, step), self._own_adapter(entry, path))
            entry.loaded.add(step)
        return self.adapter_name(entry, step), step

    def _own_adapter(self, entry: _Entry, path: Path) -> Path:
        """`path`, once resolved (symlinks followed), if it lies inside the model's run directory; else a 403."""
        assert entry.rundir is not None
        real, root = Path(path).resolve(), entry.rundir.path.resolve()
        if not real.is_relative_to(root):
            raise ServiceError(
                f"adapter {path} resolves to {real}, outside the run directory {root}; adapters are loaded only from "
                "the model's own checkpoints (copy the adapter into them to serve it)", status=403,
                type="permission_error")
        return real

    async def chat(self, served: str, request: ChatRequest) -> dict[str, Any]:
        name, pinned = split_served_name(served)
        await self.restore(name)
        entry = self.entry(name)
        await entry.gate.enter()
        try:
            request.adapter, step = await self._adapter_for(entry, pinned)
            request.model = served
            body = await entry.engine.chat(request)
            if step is not None:
                body["art_step"] = step
            return body
        finally:
            entry.gate.leave()

    async def chat_stream(self, served: str, request: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        """Checks the name before the first chunk (so errors are HTTP errors), then streams."""
        name, pinned = split_served_name(served)
        await self.restore(name)
        entry = self.entry(name)
        await entry.gate.enter()
        try:
            request.adapter, step = await self._adapter_for(entry, pinned)
        except BaseException:
            entry.gate.leave()
            raise
        request.model = served

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            try:
                async for chunk in entry.engine.chat_stream(request):
                    if step is not None:
                        chunk["art_step"] = step
                    yield chunk
            finally:
                entry.gate.leave()

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
        from .validate import check_train_groups, vocab_size

        entry = self._trainable(name)
        try:
            check_train_groups(groups, vocab_size(entry.trainer))
        except ValueError as exc:
            raise ServiceError(str(exc)) from exc
        return entry

    def _tolerance(self, entry: _Entry) -> float:
        if self.config.sync_tolerance is not None:
            return self.config.sync_tolerance
        if entry.engine.sync_tolerance is not None:
            return float(entry.engine.sync_tolerance)
        from .weight_sync import sync_tolerance

        return sync_tolerance(getattr(getattr(entry.model, "config", None), "dtype", "auto"), self.config.device)

    def drift_warning(self, entry: _Entry) -> float:
        """Mean |sampler - trainer| logprob above which a step warns: 0.1 where the engine samples at
        the trainer's precision, else twice that or twice its weight-sync tolerance (bfloat16 embedded
        engine: 0.2; vLLM on CPU: 1.0)."""
        lower_precision = entry.engine.sync_reference_dtype is not None
        return max(DRIFT_WARNING * (2 if lower_precision else 1), 2 * self._tolerance(entry))

    def _warn_drift(self, entry: _Entry, metrics: dict[str, Any]) -> None:
        mean = metrics.get("sampler_drift/mean_abs")
        limit = self.drift_warning(entry)
        if mean is not None and mean > limit:
            logger.warning(
                "%s: sampler/trainer drift: the sampler's logprobs differ from the trainer's by %.3f on average "
                "(max %.3f) over %d trained tokens (warning above %g for this engine's precision): rollouts may come "
                "from other weights than the trainer's (a stale adapter or off-policy samples)", entry.model.name,
                mean, metrics.get("sampler_drift/max_abs", float("nan")), int(metrics.get("sampler_drift/tokens", 0)),
                limit)

    def probe_ids(self, entry: _Entry) -> list[int]:
        from .models import template_messages

        trainer = entry.trainer
        ids = trainer.tokenizer.apply_chat_template(
            template_messages(_PROBE), chat_template=trainer.chat_template, tokenize=True, return_dict=False)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    async def _load_and_verify(self, entry: _Entry, step: int, path: Path | None = None) -> dict[str, float]:
        """Load checkpoint `step` (or the adapter at `path`) as ``name@step`` and check the engine serves it.

        Three checks (see `weight_sync`): the engine's logprobs within tolerance of the trainer's on the
        probe; the fingerprint of the adapter the engine holds equal to the trainer's, where the engine can
        say; and, on this step's trained sequences, the engine's move from the previous checkpoint (and
        from step 0) matching the trainer's, where the probe can tell them apart. Any failure unloads
        the adapter and raises `WeightSyncError`; the previous step stays served.
        """
        from .weight_sync import discriminate

        assert entry.rundir is not None
        trainer, engine = entry.trainer, entry.engine
        adapter = self.adapter_name(entry, step)
        t0 = time.perf_counter()
        trained = await asyncio.to_thread(trainer.probe_sequences, step, self.config.sync_probe_tokens)
        probes = [self.probe_ids(entry), *trained]
        existing = set(entry.rundir.checkpoint_steps())
        alternatives = {"previous": step - 1, "step0": 0} if step > 1 else {"previous": 0} if step == 1 else {}
        alternatives = {k: a for k, a in alternatives.items() if a in existing}
        reference = engine.sync_reference_dtype

        def trainer_side() -> tuple[dict[int, list[list[float]]], dict[int, str]]:
            steps = [step, *alternatives.values()]
            logprobs = {s: trainer.sequences_logprobs(probes, s, reference) for s in steps}
            return logprobs, {s: trainer.adapter_fingerprint(s) for s in steps}

        trained_task = asyncio.ensure_future(asyncio.to_thread(trainer_side))  # overlaps the engine's load
        try:
            await engine.load_adapter(adapter, self._own_adapter(entry, path or entry.rundir.checkpoint_path(step)))
            entry.loaded.add(step)
            t_load = time.perf_counter() - t0
            served = {step: await engine.sequences_logprobs(probes, adapter)}
            for a in alternatives.values():
                name_a, _ = await self._adapter_for(entry, a)
                served[a] = await engine.sequences_logprobs(probes, name_a)
            engine_fp = await engine.adapter_fingerprint(adapter)
        except BaseException:
            await asyncio.gather(trained_task, return_exceptions=True)  # never leave it running unobserved
            raise
        trained, trainer_fp = await trained_task

        def aligned(s: int) -> tuple[list[float], list[float]]:  # engine, trainer; tails of equal length
            e_all: list[float] = []
            t_all: list[float] = []
            for e, t in zip(served[s], trained[s], strict=True):
                n = min(len(e), len(t))
                e_all += e[len(e) - n:]
                t_all += t[len(t) - n:]
            return e_all, t_all

        failures: list[str] = []
        e_new, t_new = aligned(step)
        # the tolerance holds on the fixed probe (probes[0]), as it was set; the trained sequences
        # include sampled low-probability tokens where a half-precision engine strays further
        n_fixed = min(len(served[step][0]), len(trained[step][0]))
        diffs = [abs(a - b) for a, b in zip(served[step][0][-n_fixed:], trained[step][0][-n_fixed:], strict=True)]
        diff, tol = max(diffs, default=0.0), self._tolerance(entry)
        if not diffs or diff > tol:
            failures.append(f"the engine's logprobs on the probe differ from the trainer's for checkpoint {step} by up "
                            f"to {diff:.4g} (tolerance {tol:g}, {len(diffs)} tokens)")
        metrics: dict[str, float] = {"weight_sync/max_abs_diff": diff,
                                     "weight_sync/mean_abs_diff": sum(diffs) / max(len(diffs), 1),
                                     "weight_sync/probe_tokens": float(len(e_new))}
        if engine_fp is not None:
            metrics["weight_sync/identity_match"] = float(engine_fp == trainer_fp[step])
            if engine_fp != trainer_fp[step]:
                same = [f"checkpoint {a}'s" for a in alternatives.values() if trainer_fp[a] == engine_fp]
                failures.append(f"the engine holds adapter weights {engine_fp} ({same[0] if same else 'no checkpoint'}) "
                                f"under {adapter}, but checkpoint {step} is {trainer_fp[step]}")
        told_apart, moves = [], []
        for label, a in alternatives.items():
            e_alt, t_alt = aligned(a)
            d = discriminate(e_new, e_alt, t_new, t_alt)
            metrics |= {f"weight_sync/vs_{label}/s": d.s, f"weight_sync/vs_{label}/se": d.se,
                        f"weight_sync/vs_{label}/moved": d.moved}
            told_apart.append(d.distinguishable)
            if d.stale:
                moves.append((abs(d.s), a))
                failures.append(f"on this step's trained tokens the engine moved {d.s:.2f} (+-{d.se:.2f}) of the way "
                                f"from checkpoint {a} to {step} (1 if it served {step}, 0 if it served {a})")
        if moves and min(moves)[0] < 0.25:
            failures.append(f"its logprobs match checkpoint {min(moves)[1]}'s weights, not {step}'s")
        metrics["weight_sync/distinguishable"] = float(bool(told_apart) and all(told_apart))
        if failures:
            entry.loaded.discard(step)
            await engine.unload_adapter(adapter)
            raise WeightSyncError(f"weight-sync check failed for {adapter}: " + "; ".join(failures)
                                  + "; the engine is not serving the trained weights, so this step is not served")
        if alternatives and not all(told_apart) and engine_fp is None:
            logger.warning("%s: the probe cannot tell checkpoint %d from %s (se %s); weight sync is unverified this "
                           "step (weight_sync/distinguishable = 0)", adapter, step, sorted(alternatives.values()),
                           [round(metrics[f"weight_sync/vs_{k}/se"], 3) for k in alternatives])
        logger.info("%s: weight sync ok (max |dlogprob| %.2e, load %.3fs)", adapter, diff, t_load)
        return {**metrics, "time/load_adapter_s": t_load, "time/swap_s": time.perf_counter() - t0}

    async def _train(self, name: str, run: Callable[[Any, Progress], TrainResult], progress: Progress | None) -> TrainResult:
        entry = self._trainable(name)
        report = progress or (lambda _: None)
        async with entry.train_lock:
            report({"type": "progress", "phase": "hold", "done": 0, "total": 1})
            await entry.gate.hold()
            try:
                result: TrainResult = await asyncio.to_thread(
                    run, entry.trainer, lambda event: report({"type": "progress", **event}))
                report({"type": "progress", "phase": "swap", "done": 0, "total": 1})
                sync = await self._load_and_verify(entry, result.step)
                self._warn_drift(entry, result.metrics)
                entry.step = result.step
                report({"type": "progress", "phase": "swap", "done": 1, "total": 1})
                deleted = await self._retain(entry)  # inference is still held: no request uses an old step
                return TrainResult(step=result.step, metrics={**result.metrics, **sync, "checkpoints/deleted": deleted})
            finally:
                entry.gate.resume()

    async def train(self, name: str, groups: list[TrajectoryGroup], config: TrainConfig,
                    progress: Progress | None = None, step_id: str | None = None) -> TrainResult:
        """One GRPO step. A call repeated with the same `step_id` (a client retrying across a restart)
        returns the step it already produced instead of training the groups again."""
        entry = self.check_train(name, groups)
        done = entry.trainer.completed(step_id) if step_id else None
        if done is not None and entry.step is not None and done.step <= entry.step:
            return done
        return await self._train(name, lambda t, p: t.train(groups, config, progress=p, step_id=step_id), progress)

    async def train_sft(self, name: str, trajectories: list[Trajectory], config: SFTConfig,
                        progress: Progress | None = None, step_id: str | None = None) -> TrainResult:
        entry = self.check_train(name, [TrajectoryGroup(trajectories)])
        done = entry.trainer.completed(step_id) if step_id else None
        if done is not None and entry.step is not None and done.step <= entry.step:
            return done
        return await self._train(name, lambda t, p: t.train_sft(trajectories, config, progress=p, step_id=step_id),
                                 progress)

    async def get_step(self, name: str) -> int:
        entry = self.entry(name)
        return entry.step or 0

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
        entry = self._trainable(name)
        assert entry.rundir is not None
        return entry.rundir.checkpoint_steps()

    async def delete_checkpoints(self, name: str, steps: list[int] | None = None,
                                 best_checkpoint_metric: str | None = None) -> list[int]:
        """Delete `steps`, or (None) all but the newest and the best by `best_checkpoint_metric`."""
        from .trainer.checkpoints import checkpoints_to_delete

        entry = self._trainable(name)
        assert entry.rundir is not None and entry.step is not None
        existing = entry.rundir.checkpoint_steps()
        newest = entry.step
        if steps is None:
            history = await asyncio.to_thread(entry.rundir.read_history)
            targets = checkpoints_to_delete(existing, newest, history=history, best_metric=best_checkpoint_metric)
        else:
            targets = [s for s in steps if s in existing]
        if newest in targets:
            raise ServiceError(f"checkpoint {newest} is the one being served and trained from; it cannot be deleted")
        await self._delete(entry, targets)
        return targets

    async def _retain(self, entry: _Entry) -> list[int]:
        """Apply the model's retention (`ModelConfig.retain_checkpoints`) after a step; returns what went."""
        from .trainer.checkpoints import checkpoints_to_delete

        config: ModelConfig = entry.model.config  # type: ignore[attr-defined]
        if config.retain_checkpoints is None or entry.rundir is None or entry.step is None:
            return []
        history = await asyncio.to_thread(entry.rundir.read_history)
        targets = checkpoints_to_delete(entry.rundir.checkpoint_steps(), entry.step, history=history,
                                        best_metric=config.best_checkpoint_metric,
                                        keep_last=config.retain_checkpoints, keep_base=True)
        await self._delete(entry, targets)
        if targets:
            logger.info("%s: retention deleted checkpoints %s", entry.model.name, targets)
        return targets

    async def _delete(self, entry: _Entry, steps: list[int]) -> None:
        assert entry.trainer is not None
        for step in steps:
            if step in entry.loaded:
                entry.loaded.discard(step)
                await entry.engine.unload_adapter(self.adapter_name(entry, step))
            await asyncio.to_thread(entry.trainer.checkpoints.delete, step)

    async def close(self) -> None:
        for engine in self._engines.values():
            try:
                await engine.stop()
            except EngineError:
                logger.exception("stopping an engine failed")
        self._engines.clear()
        self._entries.clear()
