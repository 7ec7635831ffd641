"""The swap: what happens between a trained step and the first reply from it, in one place.

publish (the step's adapter, a checkpoint folder inside the run directory) -> load it on the engine
under ``name@step`` (an in-process engine takes the trainer's tensors in memory, no disk round trip,
while the trainer writes the checkpoint in a thread; an engine that reads the folder waits for it)
-> verify (the weight-sync check, see `weight_sync`) -> serve (new requests get the new step) ->
retain (`ModelConfig.retain_checkpoints`). If the check fails, the adapter is unloaded,
`WeightSyncError` is raised and the previous step stays served.

Over engine replicas (`Replicated`, `art_train.serving`) load and verify run on each replica, and a
replica serves the step only once it passed; one that fails is taken out and restarted, and a restarted
replica loads the adapters and passes the check again here (`rejoin`) before it serves.

The trainer is seen through `TrainerSide`; the engine through `Engine`. Retention waits on the
model's `Gate` until no request in flight samples from a checkpoint it deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from art_core import ModelConfig, RunDir

from .engines.base import Engine, InMemoryAdapters
from .errors import ServiceError, WeightSyncError
from .gate import Gate
from .weight_sync import discriminate
from .weight_sync import sync_tolerance as weight_sync_tolerance

__all__ = ["DRIFT_WARNING", "Replicated", "Swap", "TrainerSide", "drift_limit", "fixed_probe", "probe_budget",
           "sync_tolerance", "warn_drift"]

logger = logging.getLogger(__name__)

DRIFT_WARNING = 0.1  # mean |sampler - trainer| logprob above which a full-precision engine's step warns

_PROBE = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Name three prime numbers and say why each is prime."},
    {"role": "assistant", "content": "2, 3 and 5: each has exactly two divisors, one and itself."},
]


class TrainerSide(Protocol):
    """What the swap needs from the trainer: the ids a step trained on, logprobs, a weight fingerprint, and
    (for an engine in the same process) the adapter's tensors."""

    def trained_ids(self, step: int) -> list[list[int]]:
        """Token ids of the sequences `step` trained on, most trained tokens first ([] if unknown here)."""
        ...

    def sequences_logprobs(self, sequences: list[list[int]], step: int | None = None,
                           dtype: str | None = None) -> list[list[float]]:
        """log p(token_i | tokens before it), i >= 1, under checkpoint `step` (merged at `dtype` if given)."""
        ...

    def adapter_fingerprint(self, step: int | None = None) -> str:
        """`weight_sync.lora_fingerprint` of checkpoint `step`'s adapter."""
        ...

    def wait_saved(self) -> None:
        """Return once the newest step's checkpoint is on disk."""
        ...

    def adapter_pairs(self, step: int) -> dict[str, Any] | None:
        """A copy of `step`'s adapter tensors if the trainer holds them in memory (else None)."""
        ...


@runtime_checkable
class Replicated(Protocol):
    """An engine over several replicas (`art_train.serving.ReplicaSet`): the swap loads and checks each one."""

    def members(self) -> list[tuple[int, Engine]]:
        """The replicas up now, as (index, engine)."""
        ...

    def serve(self, index: int, engine: Engine, adapter: str) -> None:
        """Route requests for `adapter` to replica `index` too (it passed the check)."""
        ...

    def take_out(self, index: int, engine: Engine, reason: str) -> None:
        """Stop routing to replica `index` and restart it (it died or failed the check)."""
        ...

    def add_rejoin(self, hook: Callable[[Engine], Awaitable[list[str]]]) -> None:
        """Run `hook` (`Swap.rejoin`) on each restarted replica before it serves again."""
        ...


@dataclass
class _Check:
    """One engine's weight-sync check: `_compare`'s metrics and failures, its fingerprint, the load's time."""

    metrics: dict[str, float]
    failures: list[str]
    engine_fp: str | None
    t_load: float


def sync_tolerance(engine: Engine, model_config: Any, device: str | None, override: float | None) -> float:
    """Largest |engine - trainer| probe logprob accepted: `override`, else the engine's own, else the table in
    `weight_sync.sync_tolerance` for the model's dtype and the device."""
    if override is not None:
        return override
    if engine.sync_tolerance is not None:
        return float(engine.sync_tolerance)
    return weight_sync_tolerance(getattr(model_config, "dtype", "auto"), device)


def drift_limit(engine: Engine, tolerance: float) -> float:
    """Mean |sampler - trainer| logprob above which a step warns: 0.1 where the engine samples at the
    trainer's precision, else twice that or twice its weight-sync tolerance (bfloat16 embedded engine:
    0.2; vLLM on CPU: 1.0)."""
    lower_precision = engine.sync_reference_dtype is not None
    return max(DRIFT_WARNING * (2 if lower_precision else 1), 2 * tolerance)


def warn_drift(name: str, metrics: dict[str, Any], limit: float) -> None:
    """Log a warning when the step's sampler drift (`sampler_drift/mean_abs`) is above `limit`."""
    mean = metrics.get("sampler_drift/mean_abs")
    if mean is not None and mean > limit:
        logger.warning(
            "%s: sampler/trainer drift: the sampler's logprobs differ from the trainer's by %.3f on average "
            "(max %.3f) over %d trained tokens (warning above %g for this engine's precision): rollouts may come "
            "from other weights than the trainer's (a stale adapter or off-policy samples)", name,
            mean, metrics.get("sampler_drift/max_abs", float("nan")), int(metrics.get("sampler_drift/tokens", 0)),
            limit)


def fixed_probe(tokenizer: Any, chat_template: str) -> list[int]:
    """The token ids of the fixed probe (a short chat) under the model's template."""
    from .models import template_messages

    ids = tokenizer.apply_chat_template(template_messages(_PROBE), chat_template=chat_template, tokenize=True,
                                        return_dict=False)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def probe_budget(sequences: list[list[int]], budget: int) -> list[list[int]]:
    """The first sequences (whole, the last one cut) up to `budget` tokens in all; none shorter than 2."""
    out, used = [], 0
    for seq in sequences:
        if used >= budget:
            break
        ids = seq[: budget - used]
        if len(ids) >= 2:
            out.append(ids)
            used += len(ids)
    return out


@dataclass
class Swap:
    """One model's served step and the sequence that replaces it: publish, load, verify, serve, retain.

    Args:
        name: the served model name (adapters are loaded as ``name@step``).
        rundir, engine, trainer: where checkpoints live, what serves them, what trained them.
        probe: the fixed probe's token ids (a short chat, rendered with the model's template).
        tolerance: see `sync_tolerance`; probe_tokens: `BackendConfig.sync_probe_tokens`.
        retention: the model's config (`retain_checkpoints`, `best_checkpoint_metric`), None keeps all.
        delete: deletes a checkpoint folder (the trainer's `Checkpoints.delete`).
    """

    name: str
    rundir: RunDir
    engine: Engine
    trainer: TrainerSide
    probe: list[int]
    tolerance: float
    probe_tokens: int
    gate: Gate
    retention: ModelConfig | None = None
    delete: Any = None
    in_memory: bool = True  # hand the adapter over in memory where engine and trainer share a process
    step: int | None = None  # the step new requests get
    loaded: set[int] = field(default_factory=set)
    # the newest verified step's probe and the trainer's side of it: a restarted replica is checked on it
    _verified: tuple[int, list[list[int]], list[list[float]], str] | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.engine, Replicated):
            self.engine.add_rejoin(self.rejoin)

    @classmethod
    def for_trainer(cls, model: Any, rundir: RunDir, engine: Engine, trainer: Any, gate: Gate, tolerance: float,
                    probe_tokens: int) -> Swap:
        """The swap of a registered `TrainableModel` trained by a `Trainer` (its template renders the probe)."""
        return cls(name=model.name, rundir=rundir, engine=engine, trainer=trainer, gate=gate, tolerance=tolerance,
                   probe=fixed_probe(trainer.tokenizer, trainer.chat_template), probe_tokens=probe_tokens,
                   retention=model.config, delete=trainer.checkpoints.delete)

    def adapter(self, step: int) -> str:
        return f"{self.name}@{step}"

    # -- publish and load ------------------------------------------------------------------------
    def publish(self, step: int, path: Path | None = None) -> Path:
        """The folder of `step`'s adapter (or `path`), once resolved, if it lies inside the run directory;
        else a 403 (adapters are only ever loaded from the model's own checkpoints)."""
        path = Path(path or self.rundir.checkpoint_path(step))
        real, root = path.resolve(), self.rundir.path.resolve()
        if not real.is_relative_to(root):
            raise ServiceError(
                f"adapter {path} resolves to {real}, outside the run directory {root}; adapters are loaded only from "
                "the model's own checkpoints (copy the adapter into them to serve it)", status=403,
                type="permission_error")
        return real

    async def ensure_loaded(self, step: int) -> str:
        """The adapter name of checkpoint `step`, loading it first if the engine does not hold it (a 404
        if the checkpoint does not exist)."""
        if step not in self.loaded:
            path = self.rundir.checkpoint_path(step)
            if not path.exists():
                raise ServiceError(
                    f"model {self.name!r} has no checkpoint {step}; steps: {self.rundir.checkpoint_steps()}",
                    status=404, type="not_found_error")
            await self.engine.load_adapter(self.adapter(step), self.publish(step, path))
            self.loaded.add(step)
        return self.adapter(step)

    async def _load(self, engine: Engine, step: int, path: Path | None) -> None:
        """Load `step` on `engine` as ``name@step``: its tensors in memory where the engine can take them, else
        its folder."""
        pairs = None
        if path is None and self.in_memory and isinstance(engine, InMemoryAdapters):
            pairs = await asyncio.to_thread(self.trainer.adapter_pairs, step)
        if pairs is not None:
            self.publish(step)  # still only a checkpoint that exists in the run directory is served
            await engine.load_adapter_pairs(self.adapter(step), pairs)  # type: ignore[attr-defined]
        else:
            await asyncio.to_thread(self.trainer.wait_saved)  # the engine reads the checkpoint's folder
            await engine.load_adapter(self.adapter(step), self.publish(step, path))

    # -- the whole sequence after a step -----------------------------------------------------------
    async def after_step(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        """Load and verify `step`, serve it, apply retention; returns the swap's metrics."""
        sync = await self.load_and_verify(step)
        warn_drift(self.name, metrics, drift_limit(self.engine, self.tolerance))
        self.step = step  # serve: the next request gets the new adapter
        deleted = await self.retain()
        return {**sync, "checkpoints/deleted": deleted}

    async def load_and_verify(self, step: int, path: Path | None = None) -> dict[str, float]:
        """Load checkpoint `step` (or the adapter at `path`) as ``name@step`` and check the engine serves it.

        Three checks (see `weight_sync`): the engine's logprobs within tolerance of the trainer's on the
        probe; the fingerprint of the adapter the engine holds equal to the trainer's, where the engine can
        say; and, on this step's trained sequences, the engine's move from the previous checkpoint (and
        from step 0) matching the trainer's, where the probe can tell them apart. Any failure unloads
        the adapter and raises `WeightSyncError`; the previous step stays served.

        Over replicas (`Replicated`) every replica up loads and is checked; the step is served by those that
        pass (`weight_sync/replica_<i>/ok`). Those that fail are taken out and restarted, unless all fail:
        then the step fails as with one engine and the replicas keep serving the previous step.
        """
        trainer, adapter = self.trainer, self.adapter(step)
        t0 = time.perf_counter()
        probes = [self.probe, *probe_budget(trainer.trained_ids(step), self.probe_tokens)]
        existing = set(self.rundir.checkpoint_steps())
        alternatives = {"previous": step - 1, "step0": 0} if step > 1 else {"previous": 0} if step == 1 else {}
        alternatives = {k: a for k, a in alternatives.items() if a in existing}
        reference = self.engine.sync_reference_dtype

        def trainer_side() -> tuple[dict[int, list[list[float]]], dict[int, str]]:
            steps = [step, *alternatives.values()]
            logprobs = {s: trainer.sequences_logprobs(probes, s, reference) for s in steps}
            return logprobs, {s: trainer.adapter_fingerprint(s) for s in steps}

        trained_task = asyncio.ensure_future(asyncio.to_thread(trainer_side))  # overlaps the engine's load
        async with self._lock:  # a restarted replica rejoins before or after this, never during it
            try:
                members = self.engine.members() if isinstance(self.engine, Replicated) else [(None, self.engine)]
                if not members:
                    raise ServiceError(f"{adapter}: no replica is up to load it", status=503, type="engine_unavailable")
                for a in alternatives.values():
                    await self.ensure_loaded(a)
                checks = await asyncio.gather(*(self._check(e, step, path, probes, alternatives, trained_task)
                                                for _, e in members), return_exceptions=True)
                trained, trainer_fp = await trained_task
            except BaseException:
                await asyncio.gather(trained_task, return_exceptions=True)  # never leave it running unobserved
                raise
            passed = [c for c in checks if isinstance(c, _Check) and not c.failures]
            if not passed:
                self.loaded.discard(step)
                for _, engine in members:
                    with contextlib.suppress(Exception):
                        await engine.unload_adapter(adapter)
                first = checks[0]
                if isinstance(first, BaseException):
                    raise first
                raise WeightSyncError(f"weight-sync check failed for {adapter}: " + "; ".join(first.failures)
                                      + "; the engine is not serving the trained weights, so this step is not served")
            self.loaded.add(step)
            self._verified = (step, probes, trained[step], trainer_fp[step])
            metrics = dict(max(passed, key=lambda c: c.metrics["weight_sync/max_abs_diff"]).metrics)
            if isinstance(self.engine, Replicated):
                metrics |= self._serve_replicas(members, checks, adapter)
        t_load = max(c.t_load for c in passed)
        if alternatives and not metrics["weight_sync/distinguishable"] and all(c.engine_fp is None for c in passed):
            logger.warning("%s: the probe cannot tell checkpoint %d from %s (se %s); weight sync is unverified this "
                           "step (weight_sync/distinguishable = 0)", adapter, step, sorted(alternatives.values()),
                           [round(metrics[f"weight_sync/vs_{k}/se"], 3) for k in alternatives])
        logger.info("%s: weight sync ok (max |dlogprob| %.2e, load %.3fs)", adapter,
                    metrics["weight_sync/max_abs_diff"], t_load)
        return {**metrics, "time/load_adapter_s": t_load, "time/swap_s": time.perf_counter() - t0}

    async def _check(self, engine: Engine, step: int, path: Path | None, probes: list[list[int]],
                     alternatives: dict[str, int], trained_task: asyncio.Future[Any]) -> _Check:
        """Load `step` on `engine` and compare what it serves with the trainer (`_compare`)."""
        t0, adapter = time.perf_counter(), self.adapter(step)
        await self._load(engine, step, path)
        t_load = time.perf_counter() - t0
        served = {step: await engine.sequences_logprobs(probes, adapter)}
        for a in alternatives.values():
            served[a] = await engine.sequences_logprobs(probes, self.adapter(a))
        engine_fp = await engine.adapter_fingerprint(adapter)
        trained, trainer_fp = await trained_task
        metrics, failures, _ = _compare(step, served, trained, engine_fp, trainer_fp, alternatives, self.tolerance,
                                        adapter)
        return _Check(metrics, failures, engine_fp, t_load)

    def _serve_replicas(self, members: list[tuple[Any, Engine]], checks: list[_Check | BaseException],
                        adapter: str) -> dict[str, float]:
        """Serve `adapter` on the replicas that passed; take out the others. Returns per-replica metrics."""
        replicas = self.engine
        assert isinstance(replicas, Replicated)
        metrics: dict[str, float] = {}
        for (i, engine), check in zip(members, checks, strict=True):
            ok = isinstance(check, _Check) and not check.failures
            metrics[f"weight_sync/replica_{i}/ok"] = float(ok)
            if isinstance(check, _Check):
                metrics[f"weight_sync/replica_{i}/max_abs_diff"] = check.metrics["weight_sync/max_abs_diff"]
            if ok:
                replicas.serve(i, engine, adapter)
                continue
            reason = "; ".join(check.failures) if isinstance(check, _Check) else f"{type(check).__name__}: {check}"
            logger.error("%s: replica %s failed the weight-sync check: %s", adapter, i, reason)
            replicas.take_out(i, engine, f"weight-sync check of {adapter} failed")
        metrics["weight_sync/replicas_ok"] = float(sum(1 for k, v in metrics.items() if k.endswith("/ok") and v))
        metrics["weight_sync/replicas"] = float(len(members))
        return metrics

    async def rejoin(self, engine: Engine) -> list[str]:
        """Load this model's adapters on a restarted replica and check it serves the newest verified step like
        the trainer (probe logprobs and fingerprint); returns the adapters it may serve. `WeightSyncError` if not."""
        async with self._lock:
            await asyncio.to_thread(self.trainer.wait_saved)
            for step in sorted(self.loaded):
                await engine.load_adapter(self.adapter(step), self.publish(step))
            if self._verified is not None:
                step, probes, trained, trainer_fp = self._verified
                adapter = self.adapter(step)
                served = await engine.sequences_logprobs(probes, adapter)
                engine_fp = await engine.adapter_fingerprint(adapter)
                metrics, failures, _ = _compare(step, {step: served}, {step: trained}, engine_fp, {step: trainer_fp},
                                                {}, self.tolerance, adapter)
                if failures:
                    raise WeightSyncError(f"weight-sync check failed for {adapter} on a restarted replica: "
                                          + "; ".join(failures))
                logger.info("%s: weight sync ok on a restarted replica (max |dlogprob| %.2e)", adapter,
                            metrics["weight_sync/max_abs_diff"])
            return [self.adapter(step) for step in sorted(self.loaded)]

    # -- retention ---------------------------------------------------------------------------------
    async def retain(self) -> list[int]:
        """Apply the model's retention after a step; returns what went."""
        from .trainer.checkpoints import checkpoints_to_delete

        config = self.retention
        if config is None or config.retain_checkpoints is None or self.step is None:
            return []
        history = await asyncio.to_thread(self.rundir.read_history)
        targets = checkpoints_to_delete(self.rundir.checkpoint_steps(), self.step, history=history,
                                        best_metric=config.best_checkpoint_metric,
                                        keep_last=config.retain_checkpoints, keep_base=True)
        await self.remove(targets)
        if targets:
            logger.info("%s: retention deleted checkpoints %s", self.name, targets)
        return targets

    async def delete_checkpoints(self, steps: list[int] | None, best_metric: str | None) -> list[int]:
        """Delete `steps`, or (None) all but the newest and the best by `best_metric`; returns what went.
        ValueError if they include the served step."""
        from .trainer.checkpoints import checkpoints_to_delete

        assert self.step is not None
        existing = self.rundir.checkpoint_steps()
        if steps is None:
            history = await asyncio.to_thread(self.rundir.read_history)
            targets = checkpoints_to_delete(existing, self.step, history=history, best_metric=best_metric)
        else:
            targets = [s for s in steps if s in existing]
        if self.step in targets:
            raise ValueError(f"checkpoint {self.step} is the one being served and trained from; it cannot be deleted")
        await self.remove(targets)
        return targets

    async def remove(self, steps: list[int]) -> None:
        """Unload and delete checkpoints `steps`, once no request in flight samples from them."""
        await self.gate.unused(steps)
        for step in steps:
            if step in self.loaded:
                self.loaded.discard(step)
                await self.engine.unload_adapter(self.adapter(step))
            await asyncio.to_thread(self.delete, step)


def _aligned(served: list[list[float]], trained: list[list[float]]) -> tuple[list[float], list[float]]:
    """The engine's and the trainer's logprobs over all probes, each probe's tails cut to equal length."""
    e_all: list[float] = []
    t_all: list[float] = []
    for e, t in zip(served, trained, strict=True):
        n = min(len(e), len(t))
        e_all += e[len(e) - n:]
        t_all += t[len(t) - n:]
    return e_all, t_all


def _compare(step: int, served: dict[int, list[list[float]]], trained: dict[int, list[list[float]]],
             engine_fp: str | None, trainer_fp: dict[int, str], alternatives: dict[str, int], tol: float,
             adapter: str) -> tuple[dict[str, float], list[str], bool]:
    """The weight-sync metrics, the failures (empty: the engine serves `step`) and whether every
    alternative checkpoint could be told apart from `step` on the probe."""
    failures: list[str] = []
    e_new, t_new = _aligned(served[step], trained[step])
    # the tolerance holds on the fixed probe (probes[0]), as it was set; the trained sequences
    # include sampled low-probability tokens where a half-precision engine strays further
    n_fixed = min(len(served[step][0]), len(trained[step][0]))
    diffs = [abs(a - b) for a, b in zip(served[step][0][-n_fixed:], trained[step][0][-n_fixed:], strict=True)]
    diff = max(diffs, default=0.0)
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
        e_alt, t_alt = _aligned(served[a], trained[a])
        d = discriminate(e_new, e_alt, t_new, t_alt)
        metrics |= {f"weight_sync/vs_{label}/s": d.s, f"weight_sync/vs_{label}/se": d.se,
                    f"weight_sync/vs_{label}/moved": d.moved, f"weight_sync/vs_{label}/ulp": d.ulp}
        told_apart.append(d.distinguishable)
        if d.stale:
            moves.append((abs(d.s), a))
            failures.append(f"on this step's trained tokens the engine moved {d.s:.2f} (+-{d.se:.2f}) of the way "
                            f"from checkpoint {a} to {step} (1 if it served {step}, 0 if it served {a})")
    if moves and min(moves)[0] < 0.25:
        failures.append(f"its logprobs match checkpoint {min(moves)[1]}'s weights, not {step}'s")
    metrics["weight_sync/distinguishable"] = float(bool(told_apart) and all(told_apart))
    return metrics, failures, bool(told_apart) and all(told_apart)
