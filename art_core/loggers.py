"""Metrics loggers: W&B, TensorBoard and MLflow behind one small protocol.

A model picks them with ``report_to=["wandb", "tensorboard", "mlflow"]``; when it sets nothing,
``ART_REPORT_TO`` (comma-separated) decides. Each adapter imports its library only when chosen,
and a chosen library that is not installed is an error naming the extra to install.

Every `train` step and every `log` call (a `val` pass) reaches each logger as one flat dict of
numbers under ``<split>/<key>`` (``train/loss``, ``val/reward_mean``, ``train/time/step_s``...),
at the model's step. One W&B / MLflow run covers the whole training run of one model (its id is
derived from project and name, so a restarted run continues it).

Where the files go: W&B follows its own settings (``WANDB_MODE``, ``WANDB_DIR``...); TensorBoard
writes under ``ART_TENSORBOARD_DIR`` or ``<ART_HOME>/<project>/models/<name>/tensorboard``;
MLflow uses ``MLFLOW_TRACKING_URI``, else a file store in ``<ART_HOME>/mlruns``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .rundir import art_home

if TYPE_CHECKING:
    from .backend import ModelLike  # what a logger reads from a model; .model imports this module
    from .trajectory import TrajectoryGroup

__all__ = [
    "LOGGERS",
    "MetricsLogger",
    "MissingExtra",
    "MLflowLogger",
    "Reporter",
    "TensorBoardLogger",
    "WandbLogger",
    "flat_metrics",
    "register_logger",
]

logger = logging.getLogger(__name__)


class MissingExtra(ImportError):
    """A logger or tracer was chosen but its library is not installed."""


@runtime_checkable
class MetricsLogger(Protocol):
    """Receives one flat dict of numbers per step and split."""

    def log(self, metrics: dict[str, float], *, step: int) -> None: ...

    def close(self) -> None: ...


def _need(module: str, extra: str, chosen: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(
            f"report_to includes {chosen!r} but {module.split('.')[0]!r} is not installed: "
            f"pip install 'art-rl[{extra}]' (or drop {chosen!r} from report_to / ART_REPORT_TO)"
        ) from exc


def _run_key(model: ModelLike) -> str:
    return f"{model.project}-{model.name}"


class WandbLogger:
    """One W&B run per model (id ``<project>-<name>``, resumed if it exists)."""

    def __init__(self, model: ModelLike) -> None:
        self._wandb = _need("wandb", "wandb", "wandb")
        self._model = model
        self._run: Any = None

    def _start(self) -> Any:
        config = getattr(self._model, "config", None)
        self._run = self._wandb.init(
            project=self._model.project, name=self._model.name, id=_run_key(self._model), resume="allow",
            config={"base_model": self._model.base_model, **(config.model_dump() if config is not None else {})},
            reinit="create_new",
        )
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")  # train and val may arrive out of order
        return self._run

    def log(self, metrics: dict[str, float], *, step: int) -> None:
        run = self._run or self._start()
        run.log({**metrics, "step": step})

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


class TensorBoardLogger:
    """Scalar events in a TensorBoard log directory (no torch, no TensorFlow needed)."""

    def __init__(self, model: ModelLike, log_dir: str | os.PathLike[str] | None = None) -> None:
        self._writer_mod = _need("tensorboard.summary.writer.event_file_writer", "tensorboard", "tensorboard")
        self._proto = _need("tensorboard.compat.proto.event_pb2", "tensorboard", "tensorboard")
        self._summary = _need("tensorboard.compat.proto.summary_pb2", "tensorboard", "tensorboard")
        env = os.environ.get("ART_TENSORBOARD_DIR")
        default = art_home() / model.project / "models" / model.name / "tensorboard"
        self.log_dir = Path(log_dir or (Path(env) / model.project / model.name if env else default))
        self._writer: Any = None

    def log(self, metrics: dict[str, float], *, step: int) -> None:
        if self._writer is None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._writer = self._writer_mod.EventFileWriter(str(self.log_dir))
        values = [self._summary.Summary.Value(tag=k, simple_value=v) for k, v in metrics.items()]
        event = self._proto.Event(wall_time=time.time(), step=step, summary=self._summary.Summary(value=values))
        self._writer.add_event(event)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class MLflowLogger:
    """One MLflow run per model in the experiment named after its project."""

    def __init__(self, model: ModelLike, tracking_uri: str | None = None) -> None:
        self._mlflow = _need("mlflow", "mlflow", "mlflow")
        self._entities = _need("mlflow.entities", "mlflow", "mlflow")
        self._model = model
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or (art_home() / "mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3.x refuses file stores unless opted in (its default, sqlite, needs the full
            # `mlflow` package, not mlflow-skinny); a local folder is what this logger promises.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = self._mlflow.tracking.MlflowClient(tracking_uri=uri)
        self.run_id: str | None = None

    def _start(self) -> str:
        name = self._model.project
        exp = self.client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
        key = _run_key(self._model)
        found = self.client.search_runs([exp_id], filter_string=f"tags.`art.run` = '{key}'", max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            run = self.client.create_run(exp_id, run_name=self._model.name, tags={"art.run": key})
            self.run_id = run.info.run_id
            if self._model.base_model:
                self.client.log_param(self.run_id, "base_model", self._model.base_model)
        return self.run_id

    def log(self, metrics: dict[str, float], *, step: int) -> None:
        run_id = self.run_id or self._start()
        now = int(time.time() * 1000)
        batch = [self._entities.Metric(k, v, now, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):  # MLflow takes at most 1000 metrics a batch
            self.client.log_batch(run_id, metrics=batch[i : i + 1000])

    def close(self) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id)
            self.run_id = None


LOGGERS: dict[str, Callable[[ModelLike], MetricsLogger]] = {
    "wandb": WandbLogger,
    "tensorboard": TensorBoardLogger,
    "mlflow": MLflowLogger,
}


def register_logger(name: str, factory: Callable[[ModelLike], MetricsLogger]) -> None:
    """Make ``report_to=[name]`` build a logger with ``factory(model)``.

    Example:
        register_logger("stdout", lambda model: MyLogger(model.name))
    """
    LOGGERS[name] = factory


def chosen_loggers(report_to: Iterable[str] | None) -> list[str]:
    """The logger names a model uses: its ``report_to``, else ``ART_REPORT_TO``."""
    if report_to is None:
        report_to = [n.strip() for n in os.environ.get("ART_REPORT_TO", "").split(",") if n.strip()]
    names = list(dict.fromkeys(report_to))
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ValueError(
            f"report_to has unknown logger(s) {unknown}: choose from {sorted(LOGGERS)} "
            "(or add one with art_core.loggers.register_logger)"
        )
    return names


def flat_metrics(metrics: dict[str, Any], split: str) -> dict[str, float]:
    """``<split>/<key>`` for every finite number in ``metrics`` (bools as 0/1; others dropped)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key in ("step", "split", "kind", "time") or not isinstance(value, (int, float)):
            continue
        value = float(value)
        if math.isfinite(value):
            out[f"{split}/{key}"] = value
    return out


def judge_metrics(groups: Iterable[TrajectoryGroup]) -> dict[str, float]:
    """The RULER judge's calls, tokens and cost summed over groups (from ``group.metrics``)."""
    out: dict[str, float] = {}
    for g in groups:
        for key, value in g.metrics.items():
            if key.startswith("ruler_judge_") and isinstance(value, (int, float)):
                out[key] = out.get(key, 0.0) + float(value)
    return out


class Reporter:
    """The loggers of one model; built on first use, closed with `close`."""

    def __init__(self, model: ModelLike, names: list[str]) -> None:
        self.loggers = [LOGGERS[n](model) for n in names]

    def log(self, metrics: dict[str, Any], *, split: str, step: int) -> None:
        flat = flat_metrics(metrics, split)
        if not flat:
            return
        for lg in self.loggers:
            try:
                lg.log(flat, step=step)
            except Exception:  # a logging outage never stops training
                logger.exception("%s could not log step %d", type(lg).__name__, step)

    def close(self) -> None:
        for lg in self.loggers:
            try:
                lg.close()
            except Exception:
                logger.exception("%s could not close", type(lg).__name__)
