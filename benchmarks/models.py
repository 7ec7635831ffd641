"""Per bundled model: serving tok/s, trained tokens/s of one GRPO step, peak RSS, and the base model's
tool-call validity on the calculator tasks.

Each model runs in its own process (so peak RSS is that model's), on LocalBackend with the default
embedded engine (bfloat16 on a CPU with native bfloat16; the trainer float32):
  serve      the serving benchmark's workload (benchmarks/serve.py): 32 prompts of ~300 tokens,
             128 new tokens each (ignore_eos), temperature 1, 32 concurrent requests; tok/s = new tokens / wall
  validity   the calculator example's tasks (examples/mcp_rl: "What is a * b + c?", its system prompt),
             one rollout each over the real calculator MCP server (stdio), first model turn only,
             temperature 1 (as in training), 128 max tokens. Valid: a parsed tool call naming a real
             tool (calculate, convert_units, complete_task) with JSON-object arguments. Also counted:
             replies whose text looked like a call but did not parse (the engine's tool_parse_errors).
  train      one GRPO step on 2 more tasks x 4 rollouts (reward: valid call, plus 0.01 x rollout index so
             no group is skipped: this measures throughput, not learning); trained tokens/s from the step
  rss        the process's peak resident set (ru_maxrss) after all of the above

Run:  flock /tmp/art-heavy.lock .venv/bin/python benchmarks/models.py [--models qwen2.5-0.5b ...]
Writes benchmarks/results/models.json. `--smoke`: the tiny model only, 4 requests of 4 tokens, 2 tasks,
seconds, to --output or a temp file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "examples" / "mcp_rl")]

MODELS = ["smollm2-135m", "qwen2.5-0.5b", "gemma3-270m"]
REAL_TOOLS = {"calculate", "convert_units", "complete_task"}


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson interval for a rate k/n."""
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def _valid(message: dict[str, Any]) -> bool:
    calls = message.get("tool_calls") or []
    if not calls:
        return False
    for call in calls:
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "")
        except ValueError:
            return False
        if fn.get("name") not in REAL_TOOLS or not isinstance(args, dict):
            return False
    return True


async def one_model(alias: str, n_tasks: int, seed: int) -> dict[str, Any]:
    from serve import NEW, N, concurrent, prompts
    from train_calculator import SYSTEM, make_tasks

    import art_core as art
    import art_mcp
    from art_train import LocalBackend

    out: dict[str, Any] = {"model": alias}
    backend = LocalBackend(path=tempfile.mkdtemp(prefix="art-models-bench-"))
    model = art.TrainableModel(name="bench-" + "".join(c for c in Path(alias).name if c.isalnum()), project="models-bench", base_model=alias,
                               config=art.ModelConfig(max_seq_len=2048))
    try:
        t0 = time.perf_counter()
        await model.register(backend)
        out["register_s"] = round(time.perf_counter() - t0, 2)
        entry = backend.service.entry(model.name)
        engine = entry.engine
        out["engine_dtype"] = str(next(engine.model.parameters()).dtype).replace("torch.", "")
        out["parameters_m"] = round(sum(p.numel() for p in engine.model.parameters()) / 1e6, 1)
        out["tool_parser"] = engine.parser.__name__
        url = str(model.openai_client().base_url).rstrip("/")

        await concurrent(url, model.served_name(), prompts(None)[:2])  # warm up
        wall, tokens = await concurrent(url, model.served_name(), prompts(None))
        out["serve"] = {"requests": N, "new_tokens_each": NEW, "tokens": tokens, "wall_s": round(wall, 2),
                        "tok_s": round(tokens / wall, 1)}

        tasks = make_tasks(n_tasks + 2, seed)
        errors_before = engine.stats.get("tool_parse_errors", 0)
        async with art_mcp.ServerPool(art_mcp.bundled_server("calculator"), isolation="shared") as pool:
            async def first_turn(task: dict[str, Any]) -> art.Trajectory:
                return await art_mcp.rollout(model, pool, task, system_prompt=SYSTEM, max_turns=1,
                                             max_tokens=128, temperature=1.0)

            t0 = time.perf_counter()
            trajs = await asyncio.gather(*[first_turn(t) for t in tasks[:n_tasks]])
            firsts = [next((m for m in t.messages() if m["role"] == "assistant"), {}) for t in trajs]
            valid = sum(_valid(m) for m in firsts)
            calc_ok = sum(any(c["name"] == "calculate" and not c["is_error"] for c in t.metadata.get("mcp_calls", []))
                          for t in trajs)
            out["validity"] = {
                "tasks": n_tasks, "valid": valid, "rate": round(valid / n_tasks, 3), "ci95": wilson(valid, n_tasks),
                "calculate_ran_ok": calc_ok,
                "parse_errors": engine.stats.get("tool_parse_errors", 0) - errors_before,
                "any_tool_calls": sum(bool(m.get("tool_calls")) for m in firsts),
                "wall_s": round(time.perf_counter() - t0, 1),
                "examples": [(m.get("content") or "")[:160] or json.dumps(m.get("tool_calls"))[:160]
                             for m in firsts[:3]],
            }

            async def scored(task: dict[str, Any], i: int) -> art.Trajectory:
                traj = await first_turn(task)
                first = next((m for m in traj.messages() if m["role"] == "assistant"), {})
                traj.reward = float(_valid(first)) + 0.01 * i
                return traj

            groups = await art.gather_trajectory_groups(
                [art.TrajectoryGroup(scored(t, i) for i in range(4)) for t in tasks[n_tasks:]], show_progress=False)
        result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-5), verbose=False)
        m = result.metrics
        out["train"] = {"trajectories": 8, "trained_tokens": m.get("trained_tokens"),
                        "forward_backward_s": round(m.get("time/forward_backward_s", 0.0), 2),
                        "trained_tokens_per_s": round(m.get("trained_tokens_per_s", 0.0), 1),
                        "step_s": round(m.get("time/step_s", 0.0), 2),
                        "weight_sync_max_abs_diff": m.get("weight_sync/max_abs_diff")}
    finally:
        await backend.close()
    out["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)
    return out


def table(doc: dict[str, Any]) -> str:
    """The docs/models.md table from a results document."""
    rows = ["| model | engine dtype | serve tok/s | valid calls (calculator, first turn) | parse errors | "
            "trained tokens/s | peak RSS |", "|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        v, t = r["validity"], r["train"]
        rows.append(f"| `{r['model']}` | {r['engine_dtype']} | {r['serve']['tok_s']} | {v['valid']}/{v['tasks']} = "
                    f"{v['rate']:.2f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}] | {v['parse_errors']} | "
                    f"{t['trained_tokens_per_s']} | {r['peak_rss_gb']} GB |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--table", action="store_true", help="print the docs table from --output and exit")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one model, print its JSON
    parser.add_argument("--output", default=None, help="results file (default benchmarks/results/models.json)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny model, 4 requests of 4 tokens, 2 tasks; to --output or a temp file")
    args = parser.parse_args()
    if args.smoke and not args.one:
        from _smoke import smoke_out, tiny_model

        args.models, args.tasks, args.output = [tiny_model()], 2, str(smoke_out(args.output, "models.json"))
    args.output = args.output or str(ROOT / "benchmarks" / "results" / "models.json")
    if args.table:
        print(table(json.loads(Path(args.output).read_text())))
        return
    if args.one:
        if args.smoke:
            import serve

            serve.N, serve.NEW = 4, 4
        print("RESULT " + json.dumps(asyncio.run(one_model(args.one, args.tasks, args.seed))), flush=True)
        return
    results = []
    for alias in args.models:
        cmd = [sys.executable, __file__, "--one", alias, "--tasks", str(args.tasks), "--seed", str(args.seed)]
        cmd += ["--smoke"] if args.smoke else []
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"{alias} failed:\n{proc.stderr[-4000:]}")
        row = json.loads(line[len("RESULT "):])
        row["process_wall_s"] = round(time.perf_counter() - t0, 1)
        row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results.append(row)
        print(json.dumps(row), flush=True)
    import torch

    out = Path(args.output)
    earlier = json.loads(out.read_text()).get("results", []) if out.exists() else []
    ran = {r["model"] for r in results}
    for row in earlier:  # models not run this time keep their earlier row (with its own date)
        if row["model"] not in ran:
            row.setdefault("date", json.loads(out.read_text()).get("date"))
            results.append(row)
    results.sort(key=lambda r: MODELS.index(r["model"]) if r["model"] in MODELS else len(MODELS))
    doc = {
        "benchmark": "models",
        "command": "flock /tmp/art-heavy.lock .venv/bin/python benchmarks/models.py",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "note": "shared 2-core machine; each row's date says when it ran"},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "results": results,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
