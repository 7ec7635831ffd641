"""What isolation costs: rollouts through `art_mcp.ServerPool` with the bundled notes server.

Each "rollout" takes a session and makes 3 tool calls, sleeping `--think` seconds before each to
stand in for the model's turn (0 measures the MCP overhead alone). Compares one shared process, a fresh process per rollout, and per-rollout with
prewarmed spares; reports per-rollout medians, total wall time, and ratios to "shared", all
measured in the same run. Writes benchmarks/results/mcp_pool.json.

    .venv/bin/python benchmarks/mcp_pool.py [--rollouts 16] [--concurrency 4] [--think 0.3]
    .venv/bin/python benchmarks/mcp_pool.py --smoke [--out PATH]   (4 rollouts, no think time; seconds)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from pathlib import Path

import art_mcp


async def bench(
    isolation: str, prewarm: int, rollouts: int, concurrency: int, think: float
) -> dict[str, float]:
    sem = asyncio.Semaphore(concurrency)
    times: list[float] = []

    async def one(i: int) -> None:
        async with sem:
            t0 = time.perf_counter()
            async with pool.session() as s:
                await asyncio.sleep(think)
                await s.call("add_note", {"title": f"note {i}", "body": "x"})
                await asyncio.sleep(think)
                await s.call("search_notes", {"query": "note"})
                await asyncio.sleep(think)
                await s.call("list_notes")
            times.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    async with art_mcp.ServerPool(
        art_mcp.bundled_server("notes"),
        isolation=isolation,
        max_processes=concurrency + prewarm,
        prewarm=prewarm,
    ) as pool:
        await asyncio.gather(*(one(i) for i in range(rollouts)))
    total = time.perf_counter() - t0
    return {
        "rollout_median_s": statistics.median(times),
        "rollout_p90_s": sorted(times)[int(0.9 * (len(times) - 1))],
        "total_s": total,
        "processes_started": pool.started,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    configs = {
        "shared": ("shared", 0),
        "per_rollout": ("per_rollout", 0),
        "per_rollout_prewarm": ("per_rollout", 2),
    }
    results = {
        name: await bench(iso, pre, args.rollouts, args.concurrency, args.think)
        for name, (iso, pre) in configs.items()
    }
    base = results["shared"]
    for r in results.values():
        r["median_vs_shared"] = r["rollout_median_s"] / base["rollout_median_s"]
        r["total_vs_shared"] = r["total_s"] / base["total_s"]
    return {
        "benchmark": "mcp_pool",
        "rollouts": args.rollouts,
        "concurrency": args.concurrency,
        "tool_calls_per_rollout": 3,
        "think_s_per_call": args.think,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cpus",
        "results": {k: {m: round(v, 4) for m, v in r.items()} for k, r in results.items()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--think", type=float, default=0.3, help="seconds of pretend model time before each call"
    )
    parser.add_argument("--smoke", action="store_true", help="4 rollouts, 2 at a time, no think time; to --out or a temp file")
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default results/mcp_pool.json, or mcp_pool_overhead.json with --think 0)")
    args = parser.parse_args()
    name = "mcp_pool.json" if args.think > 0 else "mcp_pool_overhead.json"
    out = args.out or Path(__file__).parent / "results" / name
    if args.smoke:
        from _smoke import smoke_out

        args.rollouts, args.concurrency, args.think = 4, 2, 0.0
        out = smoke_out(args.out, "mcp_pool.json")
    report = asyncio.run(main(args))
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["results"], indent=2))
