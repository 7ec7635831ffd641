"""Every benchmarks/*.py in its `--smoke` mode (the tiny model, smallest sizes, seconds), as a subprocess.

A benchmark that raises, or writes JSON without the figures its docs quote, fails here instead of
when someone next runs it for real. The runs start together (as many at once as there are cores) and
each test checks one; their figures mean nothing. The vLLM arm of serve.py runs where vLLM is installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.vllm import vllm_python, vllm_tiny_model

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _keys(doc: dict[str, Any], *keys: str) -> None:
    missing = [k for k in keys if k not in doc]
    assert not missing, f"missing {missing} in {sorted(doc)}"


def check_autocast(doc: dict[str, Any]) -> None:
    _keys(doc, "machine", "workload", "median_s", "matmul_bf16_over_fp32", "step_bf16_over_fp32")
    assert doc["step_bf16_over_fp32"] > 0 and "native_bf16" in doc["machine"]


def check_capture_overhead(doc: dict[str, Any]) -> None:
    _keys(doc, "overhead_us_per_call", "overhead_ratio", "targets", "instant_server", "generating_server", "art_serve")
    assert doc["art_serve"]["captured_steps"] == [0] and doc["instant_server"]["runs_per_mode"] == 10


def check_decode_bandwidth(doc: dict[str, Any]) -> None:
    _keys(doc, "stream_gb_s", "weight_bytes", "rows")
    steps = doc["rows"]["2"]["decode_steps"]
    assert [s["context"] for s in steps] == [4, 16] and all(s["step_s"] > 0 and s["read_gb_s"] > 0 for s in steps)


def check_demo(doc: dict[str, Any]) -> None:
    _keys(doc, "runs", "median", "met")
    run = doc["runs"][0]
    _keys(run, "wall_s", "peak_rss_mb", "base", "trained", "difference", "held_out_questions")
    assert run["steps"] == 1 and run["trained"]["step"] == 1 and run["peak_rss_mb"] > 0


def check_e2e_vs_trl(doc: dict[str, Any]) -> None:
    _keys(doc, "machine", "settings", "clock", "target", "runs", "median", "speedup", "speedup_note", "command")
    arms = {"art", "trl"} if importlib.util.find_spec("trl") is not None else {"art"}  # TRL: the dev extras
    assert set(doc["runs"]) == arms and "flags" in doc["machine"] and "--smoke" in doc["command"]
    for arm in arms:
        run = doc["runs"][arm][0]
        _keys(run, "step_s_median", "curve", "time_to_target_s", "final_held_out", "peak_rss_mb")
        assert run["steps"] == doc["settings"]["steps"] == 2 and run["step_s_median"] > 0 and run["peak_rss_mb"] > 0
        assert [p[0] for p in run["curve"]] == [0, 1, 2] and all(0 <= p[2] <= 1 for p in run["curve"])
        assert run["curve"][0][1] == 0 < run["curve"][1][1] <= run["curve"][2][1]  # the training clock runs on
    phases = doc["runs"]["art"][0]["phases_median"]  # where ART's step goes: rollouts, then the train call
    assert phases["rollouts_s"] > 0 and phases["train_call_s"] >= phases["forward_backward_s"] > 0


def check_examples_table(doc: dict[str, Any]) -> None:
    _keys(doc, "runs", "rows", "runs_without_rows")
    assert doc["rows"] > doc["runs"] - len(doc["runs_without_rows"]) > 0  # most runs have a table


def check_mcp_pool(doc: dict[str, Any]) -> None:
    _keys(doc, "results", "rollouts")
    assert set(doc["results"]) == {"shared", "per_rollout", "per_rollout_prewarm"}
    assert doc["results"]["shared"]["processes_started"] == 1 and doc["results"]["per_rollout"]["processes_started"] >= 4


def check_models(doc: dict[str, Any]) -> None:
    row = doc["results"][0]
    _keys(row, "serve", "validity", "train", "peak_rss_gb", "engine_dtype")
    assert row["serve"]["tokens"] == 16 and row["validity"]["tasks"] == 2 and row["train"]["trained_tokens"] > 0


def check_observability(doc: dict[str, Any]) -> None:
    _keys(doc["report_10k"], "trajectories", "build_report_s")
    assert doc["report_10k"]["trajectories"] == 24 and doc["tracing"]["spans_exported"] > 0
    from tests.obs.cdp import find_chromium

    if find_chromium() is not None:  # the browser timings where Chromium is installed (CI)
        assert doc["report_10k"]["console_errors"] == [] and doc["report_10k"]["open_step_median_s"] > 0


def check_reliability(doc: dict[str, Any]) -> None:
    assert set(doc) == {"load", "cases", "weight-sync"}  # soak: tests/reliability/test_soak.py runs it longer
    load = doc["load"]
    assert load["errors"] == 0 and load["server_alive_after"]
    step = load["with_training_step"]
    assert step["served_steps"].get(str(step["new_step"]), 0) >= step["requests"] // 2  # served by the new step
    assert doc["cases"]["passed"] == doc["cases"]["total"] > 0
    stale = {k: v for k, v in doc["weight-sync"]["new_check"].items() if k.startswith("stale")}
    assert stale and all(v["verdict"] == "failed the step" for v in stale.values())


def check_ruler_tokens(doc: dict[str, Any]) -> None:
    _keys(doc, "dedup_vs_naive_tokens", "judge_calls_per_group", "scenarios")
    assert doc["groups_scored"] == 2 and doc["judge_calls_per_group"] == 1 and 0 < doc["dedup_vs_naive_tokens"] < 1


def check_serve(doc: dict[str, Any]) -> None:
    _keys(doc, "embedded_tok_s", "embedded_fp32_tok_s", "sequential_tok_s", "hf_batched_tok_s",
          "embedded_vs_hf_batched", "swap_s_transformers")
    assert doc["workload"]["requests"] == 4 and doc["embedded_tok_s"] > 0
    assert doc["swap_parts_transformers"]["weight_sync_max_abs_diff"] < 1e-2


def check_scale(doc: dict[str, Any]) -> None:
    _keys(doc, "machine", "workload", "command", "why", "rollout", "step", "replicas_2_over_1", "ranks_2_over_1")
    assert doc["replicas_2_over_1"] > 0 and doc["ranks_2_over_1"] > 0
    assert doc["step"]["ranks"]["2"]["steps"][0]["trained_tokens"] == doc["step"]["ranks"]["1"]["steps"][0]["trained_tokens"]
    assert doc["fsdp"]["steps"][0]["trained_tokens"] == doc["step"]["ranks"]["1"]["steps"][0]["trained_tokens"]
    assert len(doc["fsdp"]["peak_rss_bytes"]) == 2 and min(doc["fsdp"]["peak_rss_bytes"]) > 0
    assert len(doc["fsdp"]["load_peak_rss_bytes"]) == 1


def check_swap_cost(doc: dict[str, Any]) -> None:
    steps = doc["runs"][0]["steps"]
    assert [s["step"] for s in steps] == [1, 2] and all(s["swap_s"] > 0 for s in steps)


def check_engine_batch(doc: dict[str, Any]) -> None:
    _keys(doc, "cpu_isa", "runs")
    run = doc["runs"][0]
    assert run["engine_dtype"] in ("float32", "bfloat16") and run["peak_rss_mb"] > 0
    assert all(run[w]["requests"] > 0 and run[w]["completion_tokens"] > 0 for w in ("held_out", "rollouts", "long"))


def check_engine_flops(doc: dict[str, Any]) -> None:
    _keys(doc, "machine", "limit", "target", "met", "runs")
    # bfloat16's limit only where the CPU has it natively (elsewhere it is emulated and never served in)
    dtypes = {"float32", "bfloat16"} if doc["machine"]["native_bf16"] else {"float32"}
    assert set(doc["limit"]["matmul_gflops"]) == dtypes and doc["limit"]["stream_gb_s"] > 0
    assert doc["runs"][0]["engine_dtype"] in dtypes
    level = doc["runs"][0]["by_concurrency"]["2"]
    # 2 requests of 4 tokens: the first token of each from the prefill, 3 decode steps of 2 rows, or up to
    # 6 steps when the second request reaches the scheduler after the first has begun (a busy machine)
    run = level["runs"][0]
    assert run["decode_tokens"] == 6 and 3 <= run["decode_steps"] <= 6, run
    assert level["decode_gflops"] > 0 and 0 < level["fraction"]
    shares = level["share_of_step"]
    assert set(shares) == {"matmul", "attention", "other_ops", "sampling", "outside_ops"}
    assert shares["matmul"] > 0 and 0.8 < sum(shares.values()) < 1.05, shares


def check_sft_step(doc: dict[str, Any]) -> None:
    _keys(doc, "machine", "workload", "runs", "speedup", "one_row_per_call_median_s", "rows_together_median_s")
    # 8 questions in one batch share the system prompt: a row a call, or all eight in one
    assert doc["one_row_per_call_decoder_calls"] > doc["rows_together_decoder_calls"] >= 2


def check_train_step(doc: dict[str, Any]) -> None:
    _keys(doc, "ours_tokens_per_s", "ours_peak_rss_mb", "ours_work/decoder_tokens", "ours_work/decoder_calls",
          "ours_work/decoder_tokens_per_trained_token")
    assert doc["ours_work/decoder_calls"] > 0 and doc["ours_work/decoder_tokens_per_trained_token"] >= 1
    assert all(r["autocast"] is None and r["recompute_mlp"] is False for r in doc["runs"]["ours"])  # the defaults
    flops = doc["flops"]  # --flops: ours's step counted once more, against the matmul limit measured then
    assert flops["limit"]["matmul_gflops"]["float32"] > 0 and flops["ours"]["gflop"] > 0
    assert flops["ours"]["per_op_gflop"]["mm"] > 0 and 0 < flops["ours"]["fraction_of_limit"]
    if importlib.util.find_spec("trl") is not None:  # TRL comes with the dev extras; else its arm is skipped
        _keys(doc, "trl_tokens_per_s", "ratio", "rss_ratio")
        need = flops["ours"]["gflop"] * 5 * doc["trl_tokens_per_s"] / doc["runs"]["ours"][-1]["tokens"]
        assert flops["ours_at_5x_trl"]["gflops_per_s"] == pytest.approx(need, rel=0.1)  # ours's work at 5x TRL's speed


# benchmark -> (extra arguments, the flag that names its output file, the check of what it wrote)
def check_async_pipeline(doc: dict[str, Any]) -> None:
    _keys(doc, "summary", "command")
    assert "--steps 1" in doc["command"]


def check_swap_handoff(doc: dict[str, Any]) -> None:
    _keys(doc, "rows", "median")
    assert set(doc["median"]) == {"disk", "memory"} and all(r["swap_s"] > 0 for r in doc["rows"])


def check_idle_pool(doc: dict[str, Any]) -> None:
    _keys(doc, "median_s", "kept_over_ended", "runs", "engine_dtype", "machine")
    assert len(doc["runs"]["kept"]) == len(doc["runs"]["ended"]) == 1 and doc["kept_over_ended"] > 0
    assert doc["engine_dtype"] in ("float32", "bfloat16")  # what it served in, never "auto"


def check_step_check(doc: dict[str, Any]) -> None:
    _keys(doc, "lines")
    assert any("sha256" in line or "loss" in line for line in doc["lines"]), doc["lines"][:5]


SMOKES: dict[str, tuple[list[str], str, Callable[[dict[str, Any]], None]]] = {
    "async_pipeline": ([], "--out", check_async_pipeline),
    "swap_handoff": ([], "--out", check_swap_handoff),
    "step_check": ([], "--out", check_step_check),
    "autocast": ([], "--out", check_autocast),
    "capture_overhead": ([], "--out", check_capture_overhead),
    "decode_bandwidth": ([], "--out", check_decode_bandwidth),
    "demo": ([], "--out", check_demo),
    "e2e_vs_trl": ([], "--out", check_e2e_vs_trl),
    "engine_batch": ([], "--out", check_engine_batch),
    "engine_flops": ([], "--out", check_engine_flops),
    "idle_pool": ([], "--out", check_idle_pool),
    "examples_table": ([], "--out", check_examples_table),
    "mcp_pool": ([], "--out", check_mcp_pool),
    "models": ([], "--output", check_models),
    "observability": ([], "--out", check_observability),
    "reliability": ([], "--out", check_reliability),
    "ruler_tokens": ([], "--out", check_ruler_tokens),
    "scale": (["--arms", "rollout,step,fsdp"], "--out", check_scale),
    "serve": (["--arms", "embedded,fp32,hf"], "--out", check_serve),
    "sft_step": ([], "--out", check_sft_step),
    "swap_cost": ([], "--out", check_swap_cost),
    "train_step": (["--flops"], "--out", check_train_step),
}


def smoke_env(tiny: Path, home: Path) -> dict[str, str]:
    """This checkout first on the path (not whatever tree the virtualenv's editable install points at)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "ART_SMOKE_MODEL": str(tiny), "ART_HOME": str(home), "PYTHONPATH": path,
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_smoke(name: str, args: list[str], out: Path, env: dict[str, str], timeout: float = 600) -> dict[str, Any]:
    cmd = [sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return {"proc": proc, "out": out, "seconds": time.perf_counter() - t0, "command": " ".join(cmd)}


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest, tiny_model_path: Path,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The smoke runs this session selected, started together (one per core, at least two)."""
    chosen = sorted({item.callspec.params["name"] for item in request.session.items
                     if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params})
    base = tmp_path_factory.mktemp("smoke")
    env = smoke_env(tiny_model_path, base / "home")

    def one(name: str) -> dict[str, Any]:
        extra, flag, _ = SMOKES[name]
        out = base / f"{name}.json"
        return run_smoke(name, [*extra, flag, str(out)], out, env)

    before = results_files()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        runs = dict(zip(chosen, pool.map(one, chosen), strict=True))
    assert results_files() == before, "a smoke run wrote into benchmarks/results"
    return runs


def results_files() -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in (BENCHMARKS / "results").iterdir()}


def test_every_benchmark_has_a_smoke_run() -> None:
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(SMOKES), f"add these to SMOKES (with a --smoke mode): {sorted(scripts - set(SMOKES))}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(SMOKES))
def test_benchmark_smoke_runs_and_writes_its_figures(name: str, smoke_runs: dict[str, dict[str, Any]]) -> None:
    run = smoke_runs[name]
    proc = run["proc"]
    assert proc.returncode == 0, f"{run['command']} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    doc = json.loads(run["out"].read_text())
    SMOKES[name][2](doc)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_serve_smoke_vllm_arm_reaches_vllm_with_its_key(tiny_model_path: Path, tmp_path: Path,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The raw vLLM arm talks to vLLM's own port, which answers only the engine's API key (it got 401 before)."""
    out = tmp_path / "serve.json"
    served = vllm_tiny_model(tmp_path_factory)
    env = {**smoke_env(tiny_model_path, tmp_path / "home"), "ART_SMOKE_VLLM_MODEL": str(served)}
    run = run_smoke("serve", ["--arms", "vllm", "--vllm-python", vllm_python(), "--out", str(out)], out, env,
                    timeout=840)
    assert run["proc"].returncode == 0, f"{run['command']}:\n{run['proc'].stderr[-4000:]}"
    doc = json.loads(out.read_text())
    assert doc["raw_vllm_tok_s"] > 0 and doc["raw_vllm_with_logprobs_tok_s"] > 0 and doc["proxy_vllm_tok_s"] > 0
    assert doc["workload"]["vllm_base_model"] == str(served)


def test_e2e_clock_counts_each_step_once(monkeypatch):
    """Steps between held-out points are each counted once, and evaluation stays off the clock."""
    spec = importlib.util.spec_from_file_location("e2e_vs_trl", BENCHMARKS / "e2e_vs_trl.py")
    assert spec and spec.loader
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)
    now = iter([0.0, 10.0, 13.0, 100.0, 104.0, 105.0])  # start, eval, step 1, step 2, eval, step 3
    monkeypatch.setattr(e2e, "time", SimpleNamespace(perf_counter=lambda: next(now)))
    clock = e2e.Clock()
    clock.point(0, 0.1)  # held-out at step 0 took 10 s
    clock.lap()
    clock.lap()
    clock.point(2, 0.2)  # this evaluation took 4 s
    clock.lap()
    assert clock.step_s == [3.0, 87.0, 1.0] and clock.train_s == 91.0
    assert clock.curve == [[0, 0.0, 0.1], [2, 90.0, 0.2]]
