"""A real (tiny) training run for the observability tests: LocalBackend, two GRPO steps, one val pass.

Every logger is chosen (W&B offline, TensorBoard, MLflow file store), rollouts are traced into an
in-memory exporter, and one context tool call per rollout gives the report something to show.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import art_core as art


@dataclass
class Run:
    home: Path
    rundir: Path
    model: art.TrainableModel
    results: list[art.TrainResult]
    val_metrics: dict
    spans: list
    wandb_dir: Path
    tb_dir: Path
    mlflow_uri: str
    metrics_text: str


PROMPT = "What is the weather in Paris?"
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


async def _run(home: Path, tiny: Path, exporter: object) -> Run:
    import httpx

    from art_core import tracing
    from art_train import LocalBackend

    backend = LocalBackend(path=home)
    model = art.TrainableModel(name="obs-run", project="obs", base_model=str(tiny),
                               report_to=["wandb", "tensorboard", "mlflow"])
    tracing.enable_tracing(exporter)
    try:
        await model.register(backend)
        client = model.openai_client()

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                messages = [{"role": "user", "content": PROMPT},
                            {"role": "assistant", "content": None, "tool_calls": [CALL]}]
                art.record_completion(messages[:1], messages[1], tools=TOOLS)  # a context turn
                art.record_tool_result("call_1", "sunny, 21 C", name="get_weather")
                r = await client.chat.completions.create(
                    model=model.served_name(), messages=[*messages, {"role": "tool", "tool_call_id": "call_1",
                                                                    "content": "sunny, 21 C"}],
                    tools=TOOLS, max_tokens=8, temperature=1.0, seed=i)
            traj.reward = float(len(r.choices[0].message.content or "") % 5) / 4
            traj.log(f"RULER judge: {traj.reward:.2f}: rollout {i} answered in {len(r.choices[0].message.content or '')} chars")
            return traj

        results = []
        for step in range(2):
            groups = await art.gather_trajectory_groups(
                [art.TrajectoryGroup(rollout(step * 100 + g * 4 + i) for i in range(4)) for g in range(2)],
                show_progress=False)
            for g in groups:
                g.metrics.update(ruler_judge_calls=1, ruler_judge_prompt_tokens=100, ruler_judge_cost_usd=0.001)
            results.append(await model.train(groups, config=art.TrainConfig(learning_rate=5e-2), verbose=False))
        val = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(1000 + i) for i in range(4))], show_progress=False)
        val_metrics = await model.log(val, split="val")
        metrics_text = httpx.get(backend.url.rstrip("/") + "/metrics").text if backend.url else ""
    finally:
        model.reporter().close()
        tracing.disable_tracing()
        await backend.close()
    return Run(home=home, rundir=home / "obs" / "models" / "obs-run", model=model, results=results,
               val_metrics=val_metrics, spans=list(exporter.get_finished_spans()),  # type: ignore[attr-defined]
               wandb_dir=Path(os.environ["WANDB_DIR"]), tb_dir=Path(os.environ["ART_TENSORBOARD_DIR"]),
               mlflow_uri=os.environ["MLFLOW_TRACKING_URI"], metrics_text=metrics_text)


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from art_train.models import build_tiny_model

    base = tmp_path_factory.mktemp("obs")
    tiny = build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama")
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(base / "wandb"), "WANDB_SILENT": "true",
           "WANDB_CACHE_DIR": str(base / "wandb-cache"), "WANDB_CONFIG_DIR": str(base / "wandb-config"),
           "WANDB_DATA_DIR": str(base / "wandb-data"),
           "WANDB_CONSOLE": "off", "ART_TENSORBOARD_DIR": str(base / "tb"),
           "MLFLOW_TRACKING_URI": (base / "mlruns").as_uri()}
    (base / "wandb").mkdir()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return asyncio.run(_run(base / "home", tiny, InMemorySpanExporter()))
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def history(run: Run) -> list[dict]:
    return [json.loads(line) for line in (run.rundir / "history.jsonl").read_text().splitlines()]
