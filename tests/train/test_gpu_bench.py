"""The GPU run (benchmarks/gpu) and its CPU twin: every section's code path on a tiny model, on CPU.

The twin runs as the GPU machine would (each section in its own process, datasets/pandas/pyarrow
missing so TRL's stand-ins are used) and fails if any section raised, timed out or was skipped.
`test_gpu_run` is the same run at real shapes on CUDA (skipped without a GPU; the twin is its CPU twin).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "gpu" / "bench.py"


def run_bench(out: Path, *args: str, hide: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if hide:
        env["ART_GPU_BENCH_HIDE"] = "datasets,pandas,pyarrow"
    proc = subprocess.run([sys.executable, str(BENCH), "--out", str(out), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=870)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "gpu.json").read_text())


def failures(report: dict[str, Any]) -> dict[str, Any]:
    return {n: {k: s.get(k) for k in ("status", "error", "traceback")}
            for n, s in report["sections"].items() if s["status"] != "ok"}


@pytest.mark.slow
def test_cpu_twin_runs_every_section(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH.parent))
    from bench import PLAN, TWIN_SKIPS

    report = run_bench(tmp_path, "--cpu", "--tiny", "--budget", "840", hide=True)
    sections = report["sections"]
    assert set(sections) == {name for name, *_ in PLAN} - TWIN_SKIPS
    assert not failures(report), json.dumps(failures(report), indent=1)[:6000]
    assert (tmp_path / "gpu.log").stat().st_size > 0

    ours, trl = sections["step/qwen2.5-0.5b/ours"], sections["step/qwen2.5-0.5b/trl"]
    assert ours["tokens"] == trl["tokens"] > 0  # both arms trained the same completion tokens
    assert ours["tokens_per_s"] > 0 and trl["tokens_per_s"] > 0 and ours["peak_gib"] > 0
    assert ours["dtypes"]["trainable"] == ["torch.float32"] and ours["optimizer_state"] == ["torch.float32"]
    assert trl["datasets_pandas"] == ["datasets", "pandas", "pyarrow"]  # TRL ran on the stand-ins, as on the GPU

    engine = sections["engine/qwen2.5-0.5b"]
    for c in (1, 4, 16):
        assert engine[f"engine_{c}"]["tokens"] == c * engine["new_tokens"]
        assert 0 < engine[f"engine_{c}"]["bandwidth_fraction"] < 1
        assert engine[f"hf_generate_{c}"]["tokens_per_s"] > 0
    assert "engine_16" in report["summary"]

    sync = sections["weight_sync/qwen2.5-0.5b"]
    assert sync["correct"]["weight_sync/identity_match"] == 1.0
    assert sync["correct"]["weight_sync/max_abs_diff"] <= sync["tolerance"]
    assert sync["stale_identity"]["caught"] is True and "checkpoint 0's" in sync["stale_identity"]["message"]
    assert "stale_probe_only" in sync

    loop = sections["loop/qwen2.5-0.5b"]
    for step in (1, 2, 3):
        row = loop[f"step_{step}"]
        assert row["served_step"] == step and row["trained_tokens"] > 0
        assert row["weight_sync"]["weight_sync/identity_match"] == 1.0
        assert {"time/forward_backward_s", "time/swap_s"} <= set(row["times"])


def test_a_failing_or_hung_section_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH.parent))
    import bench

    plan = [("bad", "env", {"no_such_argument": 1}, 120), ("slow", "env", {}, 0.5),
            ("env", "env", {}, 120)]
    original = bench.PLAN
    bench.PLAN = plan
    try:
        argv = sys.argv
        sys.argv = ["bench.py", "--cpu", "--tiny", "--out", str(tmp_path), "--budget", "300"]
        bench.main()
    finally:
        bench.PLAN, sys.argv = original, argv
    sections = json.loads((tmp_path / "gpu.json").read_text())["sections"]
    assert sections["bad"]["status"] == "error"
    assert "no_such_argument" in sections["bad"]["error"] and "Traceback" in sections["bad"]["traceback"]
    assert sections["slow"]["status"] == "timeout"
    assert sections["env"]["status"] == "ok" and sections["env"]["art_imports"] == "ok"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; test_cpu_twin_runs_every_section is its CPU twin")
def test_gpu_run(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "--budget", "420", "--sections", "env,step/qwen2.5-0.5b,engine,weight_sync,loop")
    assert not failures(report), json.dumps(failures(report), indent=1)[:6000]
    assert report["sections"]["step/qwen2.5-0.5b/ours"]["dtypes"]["frozen"] == ["torch.bfloat16"]
