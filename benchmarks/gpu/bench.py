"""The GPU run: ART's trainer, embedded engine, weight sync and whole loop on CUDA, one JSON out.

Each section runs in its own process under its own time limit (so GPU memory is freed between
arms and one failure or hang costs only its section); a section that raises records its error and
traceback and the run goes on. The JSON is rewritten after every section and as sections record,
so a run cut short keeps what it measured. Models are random-initialised at real shapes
(`shapes.py`); nothing is downloaded.

Usage:
    python benchmarks/gpu/bench.py --out DIR [--budget 420]     # on a CUDA machine (run.sh)
    python benchmarks/gpu/bench.py --cpu --tiny --out DIR       # the CPU twin: every code path, tiny model
Writes DIR/gpu.json and DIR/gpu.log.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# (section name, function in sections.py, keyword arguments, time limit in seconds on the GPU), most valuable first
PLAN: list[tuple[str, str, dict[str, Any], int]] = [
    ("env", "env", {}, 60),
    ("step/qwen2.5-0.5b/ours", "step_ours", {"shape": "qwen2.5-0.5b"}, 60),
    ("step/qwen2.5-0.5b/trl", "step_trl", {"shape": "qwen2.5-0.5b"}, 60),
    ("step/qwen2.5-7b/ours", "step_ours", {"shape": "qwen2.5-7b"}, 100),
    ("step/qwen2.5-7b/trl", "step_trl", {"shape": "qwen2.5-7b"}, 110),
    ("engine/qwen2.5-0.5b", "engine", {"shape": "qwen2.5-0.5b"}, 90),
    ("weight_sync/qwen2.5-0.5b", "weight_sync", {"shape": "qwen2.5-0.5b"}, 70),
    ("loop/qwen2.5-0.5b", "loop", {"shape": "qwen2.5-0.5b"}, 100),
    ("step/qwen2.5-0.5b/ours_no_checkpointing", "step_ours", {"shape": "qwen2.5-0.5b", "gradient_checkpointing": False}, 45),
]
TWIN_SKIPS = {"step/qwen2.5-7b/ours", "step/qwen2.5-7b/trl", "step/qwen2.5-0.5b/ours_no_checkpointing"}
MIN_SECTION_S = 20  # a section with less time left than this is skipped

log = logging.getLogger("gpu-bench")


def child(args: argparse.Namespace) -> None:
    """Runs one section; its result file is rewritten on every record() and ends with its status."""
    sys.path.insert(0, str(HERE))
    from sections import SECTIONS, Ctx

    result_path = Path(args.result)
    result: dict[str, Any] = {}

    def record(**fields: Any) -> None:
        result.update(fields)
        tmp = result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(result_path)
        log.info("%s: %s", args.child, json.dumps(fields, default=str)[:400])

    ctx = Ctx(device=args.device, tiny=args.tiny, scratch=Path(args.scratch))
    try:
        SECTIONS[args.function](ctx, record, **json.loads(args.kwargs))
    except BaseException as exc:  # noqa: BLE001 - recorded, and the exit status says so
        record(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        sys.exit(1)


def run_section(name: str, function: str, kwargs: dict[str, Any], limit: float, args: argparse.Namespace,
                scratch: Path) -> dict[str, Any]:
    result_path = scratch / f"section-{abs(hash(name))}.json"
    result_path.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--function", function,
           "--kwargs", json.dumps(kwargs), "--result", str(result_path), "--scratch", str(scratch),
           "--device", args.device, "--log", args.log] + (["--tiny"] if args.tiny else [])
    t0 = time.perf_counter()
    status = "ok"
    with open(args.log, "a") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
            if rc != 0:
                status = "error"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = "timeout"
    out: dict[str, Any] = {}
    if result_path.exists():
        out = json.loads(result_path.read_text())
    if status == "ok" and "error" in out:
        status = "error"
    if status == "error" and "error" not in out:
        out["error"] = f"the section's process exited with {proc.returncode} (see gpu.log)"
    return {**out, "status": status, "wall_s": round(time.perf_counter() - t0, 2), "limit_s": round(limit, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--cpu", action="store_true", help="run on the CPU (the twin)")
    p.add_argument("--tiny", action="store_true", help="a tiny model and short rows instead of the real shapes")
    p.add_argument("--budget", type=float, default=420.0, help="seconds for all sections together")
    p.add_argument("--sections", default="", help="comma-separated prefixes of section names to run (default all)")
    p.add_argument("--child")
    p.add_argument("--function")
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--result")
    p.add_argument("--scratch")
    p.add_argument("--device", default="cuda")
    p.add_argument("--log")
    args = p.parse_args()
    if args.child:
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [{args.child}] %(name)s: %(message)s")
        child(args)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.log = str(out / "gpu.log")
    args.device = "cpu" if args.cpu else "cuda"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                        handlers=[logging.FileHandler(args.log), logging.StreamHandler(sys.stdout)])
    scratch = Path(tempfile.mkdtemp(prefix="art-gpu-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    os.environ["ART_HOME"] = str(scratch / "art-home")
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    plan = [s for s in PLAN if not chosen or any(s[0].startswith(c) for c in chosen)]
    if args.tiny:  # one tiny shape stands in for both: each code path once
        plan = [s for s in plan if s[0] not in TWIN_SKIPS]
    report: dict[str, Any] = {"device": args.device, "tiny": args.tiny, "budget_s": args.budget,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "command": " ".join([Path(sys.executable).name, *sys.argv]), "sections": {}}
    deadline = time.monotonic() + args.budget

    def write() -> None:
        (out / "gpu.json").write_text(json.dumps(report, indent=1, default=str) + "\n")

    write()
    for name, function, kwargs, limit in plan:
        left = deadline - time.monotonic()
        if left < MIN_SECTION_S:
            report["sections"][name] = {"status": "skipped", "why": f"{left:.0f} s left of the budget"}
            write()
            continue
        log.info("section %s (limit %.0f s)", name, min(limit * (3 if args.tiny else 1), left))
        result = run_section(name, function, kwargs, min(limit * (3 if args.tiny else 1), left), args, scratch)
        report["sections"][name] = result
        log.info("section %s: %s in %.1f s%s", name, result["status"], result["wall_s"],
                 f" ({result.get('error')})" if result["status"] != "ok" else "")
        write()
    report["summary"] = summary(report["sections"])
    report["wall_s"] = round(args.budget - (deadline - time.monotonic()), 1)
    write()
    shutil.rmtree(scratch, ignore_errors=True)
    log.info("summary: %s", json.dumps(report["summary"], indent=1))


def summary(sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The targets' ratios where both arms ran."""
    s: dict[str, Any] = {"failed": [n for n, r in sections.items() if r.get("status") not in ("ok", "skipped")],
                         "skipped": [n for n, r in sections.items() if r.get("status") == "skipped"]}
    for shape in ("qwen2.5-0.5b", "qwen2.5-7b"):
        ours, trl = sections.get(f"step/{shape}/ours", {}), sections.get(f"step/{shape}/trl", {})
        if "tokens_per_s" in ours and "tokens_per_s" in trl:
            s[f"step/{shape}"] = {"speed_vs_trl": ours["tokens_per_s"] / trl["tokens_per_s"],
                                  "peak_memory_vs_trl": ours["peak_gib"] / trl["peak_gib"]}
    engine = sections.get("engine/qwen2.5-0.5b", {})
    for c in (1, 4, 16, 64):
        if f"engine_{c}" in engine and f"hf_generate_{c}" in engine:
            s[f"engine_{c}"] = {"tokens_per_s": engine[f"engine_{c}"]["tokens_per_s"],
                                "vs_hf_generate": engine[f"engine_{c}"]["tokens_per_s"]
                                / engine[f"hf_generate_{c}"]["tokens_per_s"],
                                "bandwidth_fraction": engine[f"engine_{c}"]["bandwidth_fraction"]}
    return s


if __name__ == "__main__":
    main()
