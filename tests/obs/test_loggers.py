"""Each logger's files, read back: W&B (offline run file), TensorBoard (event files), MLflow (file store)."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

import art_core as art
from art_core import loggers

from .conftest import Run, history

# what every train step must carry to each logger (names as the trainer and the weight sync write them)
TRAIN_KEYS = ["train/reward_mean", "train/reward_std", "train/loss", "train/kl", "train/entropy", "train/grad_norm",
              "train/clip_fraction", "train/trained_tokens", "train/time/step_s", "train/weight_sync/max_abs_diff",
              "train/ruler_judge_calls", "train/ruler_judge_cost_usd"]


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file: W&B's LevelDB-style log (7-byte file header, 32 KiB blocks,
    each chunk: crc32 (4), length (2), type (1: full, 2: first, 3: middle, 4: last))."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):
            records.append(pending)
            pending = b""
    return records


def test_wandb_offline_run_holds_every_step(run: Run) -> None:
    from wandb.proto import wandb_internal_pb2

    files = list(run.wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, f"one W&B run per training run, found {files}"  # not one per step
    rows = []
    for raw in _wandb_records(files[0]):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(raw)
        if rec.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item})
    train = [r for r in rows if "train/loss" in r]
    val = [r for r in rows if "val/reward_mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    assert [r["step"] for r in val] == [2]
    for key in TRAIN_KEYS:
        assert all(key in r for r in train), key
    assert train[0]["train/loss"] == pytest.approx(run.results[0].metrics["loss"])
    assert val[0]["val/reward_mean"] == pytest.approx(run.val_metrics["reward_mean"])


def test_tensorboard_event_files_read_back(run: Run) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run.tb_dir / "obs" / "obs-run"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for key in TRAIN_KEYS:
        assert key in tags, key
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [1, 2]
    assert [e.value for e in loss] == pytest.approx([r.metrics["loss"] for r in run.results], rel=1e-6)
    [val] = acc.Scalars("val/reward_mean")
    assert (val.step, val.value) == (2, pytest.approx(run.val_metrics["reward_mean"], rel=1e-6))


def test_mlflow_file_store_reads_back(run: Run) -> None:
    from mlflow.tracking import MlflowClient

    assert run.mlflow_uri.startswith("file:") and Path(run.mlflow_uri[5:].lstrip("/")).parts  # a local folder
    client = MlflowClient(tracking_uri=run.mlflow_uri)
    exp = client.get_experiment_by_name("obs")
    [found] = client.search_runs([exp.experiment_id])  # one run for the whole training run
    assert found.info.run_name == "obs-run" and found.info.status == "FINISHED"
    kl = client.get_metric_history(found.info.run_id, "train/kl")
    assert sorted(m.step for m in kl) == [1, 2]
    assert {m.step: m.value for m in kl}[2] == pytest.approx(run.results[1].metrics["kl"])
    assert client.get_metric_history(found.info.run_id, "val/reward_mean")[0].step == 2
    assert client.get_metric_history(found.info.run_id, "train/weight_sync/max_abs_diff")


def test_history_file_matches_what_loggers_got(run: Run) -> None:
    steps = [h for h in history(run) if h.get("kind") == "grpo" or "loss" in h]
    assert len(steps) == 2 and steps[1]["loss"] == pytest.approx(run.results[1].metrics["loss"])


def test_unknown_logger_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown logger\(s\) \['wandbb'\]: choose from \['mlflow', 'tensorboard', 'wandb'\]"):
        art.TrainableModel(name="m", base_model="x", report_to=["wandbb"])


@pytest.mark.parametrize("name,module", [("wandb", "wandb"), ("tensorboard", "tensorboard"), ("mlflow", "mlflow")])
def test_chosen_but_not_installed_names_the_extra(name: str, module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError, as if not installed
    model = art.TrainableModel(name="m", base_model="x", report_to=[name])
    with pytest.raises(loggers.MissingExtra, match=rf"pip install 'art-rl\[{name}\]'"):
        model.reporter()


def test_report_to_stays_on_the_client() -> None:
    # a logger registered only here must not reach the server's copy of the model, nor model.json
    loggers.register_logger("mine", lambda model: None)  # type: ignore[arg-type,return-value]
    try:
        model = art.TrainableModel(name="m", base_model="x", report_to=["mine"])
        assert "report_to" not in model.model_dump() and "report_to" not in model.model_dump_json()
    finally:
        loggers.LOGGERS.pop("mine")


def test_environment_chooses_loggers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ART_REPORT_TO", "tensorboard")
    monkeypatch.setenv("ART_TENSORBOARD_DIR", str(tmp_path))
    model = art.TrainableModel(name="env-chosen", project="p", base_model="x")
    [lg] = model.reporter().loggers
    assert isinstance(lg, loggers.TensorBoardLogger) and lg.log_dir == tmp_path / "p" / "env-chosen"
    monkeypatch.setenv("ART_REPORT_TO", "")
    assert art.TrainableModel(name="none", base_model="x").reporter().loggers == []


def test_a_failing_logger_does_not_stop_training(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def __init__(self, model: object) -> None: ...
        def log(self, metrics: dict, *, step: int) -> None:
            raise ConnectionError("wandb.ai unreachable")
        def close(self) -> None: ...

    loggers.register_logger("broken", Broken)
    try:
        model = art.TrainableModel(name="m", base_model="x", report_to=["broken"])
        model.reporter().log({"loss": 1.0}, split="train", step=1)  # logged, not raised
        assert "could not log step 1" in caplog.text
    finally:
        loggers.LOGGERS.pop("broken")


def test_flat_metrics_keeps_finite_numbers_only() -> None:
    flat = loggers.flat_metrics({"loss": 0.5, "step": 3, "ok": True, "bad": float("nan"), "name": "x"}, "train")
    assert flat == {"train/loss": 0.5, "train/ok": 1.0}
