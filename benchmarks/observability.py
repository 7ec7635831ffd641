"""Observability figures: the report at 10,000 trajectories, and what tracing costs per LLM call.

report_10k: a synthetic run (100 steps x 10 groups x 10 trajectories, 10-40 sampled tokens each,
written as the trainer writes them), `build_report` on it, then headless Chromium (DevTools
protocol): page load until the newest step is drawn, opening other steps (each loads its own
data file), and re-sorting a step's 100 trajectories by reward. Medians.

tracing: the capture hook's cost per chat completion with tracing off (what every user pays) and
on (events noted, then one trace per rollout made into an in-memory exporter).

Run: .venv/bin/python benchmarks/observability.py   (needs Chromium: scripts/setup_chromium.sh)
Writes benchmarks/results/observability.json. `--smoke`: a 3-step run of 2 x 4 trajectories, 400 traced
calls, seconds, to --out or a temp file; the browser timings only where Chromium is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import art_core as art  # noqa: E402
from art_core import tracing  # noqa: E402


def report_10k(steps: int = 100, groups: int = 10, size: int = 10, loads_n: int = 5, browser: bool = True) -> dict:
    from art_train.report import build_report
    from tests.obs.cdp import Page
    from tests.obs.test_report import make_large_run

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = make_large_run(Path(tmp), steps=steps, groups=groups, size=size)
        t_make = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = build_report(path, tokens=False)
        t_build = time.perf_counter() - t0
        data_bytes = sum(f.stat().st_size for f in (index.parent / "data").iterdir())
        index_bytes = index.stat().st_size
        out = {"trajectories": steps * groups * size, "steps": steps, "write_run_s": round(t_make, 2),
               "build_report_s": round(t_build, 2), "index_html_kb": round(index_bytes / 1024, 1),
               "data_mb": round(data_bytes / 2**20, 1)}
        if not browser:
            return {**out, "browser": "skipped: no Chromium (scripts/setup_chromium.sh)"}
        loads, opens, sorts = [], [], []
        with Page() as page:
            for _ in range(loads_n):
                loads.append(page.goto(index.as_uri() + "#"))
                page.call("Page.navigate", url="about:blank")
            page.goto(index.as_uri())
            for key in [f"train-{s:04d}" for s in (10, 30, 50, 70, 90) if s <= steps] or ["train-0001"]:
                opens.append(page.evaluate(
                    f"(async () => {{ const t = performance.now(); await window.artOpen('{key}');"
                    " return (performance.now() - t) / 1000; })()", await_promise=True))
            for order in ("reward-desc", "reward-asc", "group", "reward-desc", "reward-asc"):
                sorts.append(page.evaluate(
                    "(() => { const s = document.getElementById('sort-select'); const t = performance.now();"
                    f" s.value = '{order}'; s.dispatchEvent(new Event('change')); return (performance.now() - t) / 1000; }})()"))
            errors = page.errors()
    return {
        **out,
        "page_load_to_drawn_median_s": round(statistics.median(loads), 3),
        "open_step_median_s": round(statistics.median(opens), 3),
        "resort_100_trajectories_median_s": round(statistics.median(sorts), 4),
        "console_errors": errors,
    }


def tracing_cost(calls: int = 20_000) -> dict:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    req = [{"role": "user", "content": "hi"}]
    reply = {"role": "assistant", "content": "yo", "sample": {"token_ids": [1, 2, 3], "logprobs": [-0.1] * 3, "step": 0}}

    def per_call() -> float:  # rollouts of 4 calls, as in a short agent loop
        trajs = [art.Trajectory() for _ in range(calls // 4)]
        t0 = time.perf_counter()
        for traj in trajs:
            for _ in range(4):
                tracing.on_completion(traj, req, reply, None)
        elapsed = time.perf_counter() - t0
        if tracing._state is not None:
            tracing._state.pending.clear()
        return elapsed / calls * 1e6

    off = statistics.median(per_call() for _ in range(5))
    exporter = InMemorySpanExporter()
    tracing.enable_tracing(exporter)
    try:
        on = statistics.median(per_call() for _ in range(5))
        trajs = []
        for _ in range(200):  # 200 rollouts of 4 calls: note, then emit
            t = art.Trajectory()
            for _ in range(4):
                tracing.on_completion(t, req, reply, None)
            trajs.append(t)
        t0 = time.perf_counter()
        for t in trajs:
            tracing.trace_trajectory(t)
        emit = (time.perf_counter() - t0) / len(trajs) * 1e6
    finally:
        tracing.disable_tracing()
    return {"hook_off_us_per_call": round(off, 3), "hook_on_us_per_call": round(on, 2),
            "emit_trace_us_per_rollout_of_4_calls": round(emit, 1), "spans_exported": len(exporter.get_finished_spans())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a 3-step run, 400 traced calls; to --out or a temp file")
    parser.add_argument("--out", type=Path, default=None, help="results file (default results/observability.json)")
    args = parser.parse_args()
    path = args.out or ROOT / "benchmarks" / "results" / "observability.json"
    if args.smoke:
        from _smoke import smoke_out

        from tests.obs.cdp import find_chromium

        path = smoke_out(args.out, "observability.json")
        report = report_10k(steps=3, groups=2, size=4, loads_n=1, browser=find_chromium() is not None)
        tracing_figures = tracing_cost(calls=400)
    else:
        report, tracing_figures = report_10k(), tracing_cost()
    out = {"benchmark": "observability", "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
           "report_10k": report, "tracing": tracing_figures}
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
