"""The embedded engine on a batch of requests: wall time and the memory a batch adds, per code tree and dtype.

Workloads, each run three times through `TransformersEngine.chat` in-process (no HTTP), on smollm2-135m:
  held_out   the demo's 64 held-out addition questions, greedy (what `art demo` scores at each checkpoint)
  rollouts   8 training questions x 6 replies at temperature 0.7, seeded (one demo step's rollouts)
  long       32 prompts of ~300 tokens, 32 new tokens each, temperature 1, seeded (serve-shaped)
For each: the median wall time (the prefix cache emptied before each repeat) and the peak RSS above the loaded engine's (sampled every millisecond
in a thread), and the process's peak RSS at the end. Each tree and dtype runs in its own process,
one after the other in one invocation, so trees are compared by ratio on the same machine.

Run (heavy: under the shared lock):
    git worktree add /tmp/art-before <commit>
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/engine_batch.py --trees /tmp/art-before .
Writes benchmarks/results/engine_batch.json. `--smoke`: this tree, the tiny model, a few requests, seconds,
to --out or a temp file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from _trees import cpu_isa, run_in_tree, short_commit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "engine_batch.json"

ONE_TREE = r'''
import asyncio, json, os, random, resource, statistics, sys, threading, time
from art_train.demo_tasks import ADDITION
from art_train.engines.base import ChatRequest, SamplingParams
from art_train.engines.transformers.engine import TransformersEngine

PAGE = os.sysconf("SC_PAGE_SIZE")
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE >> 20

peak = [0]
def watch():
    while True:
        peak[0] = max(peak[0], rss_mb())
        time.sleep(0.001)

def workloads(scale):
    n = lambda count: max(1, count // scale)
    held = [(ADDITION.messages(q), 0.0, ADDITION.max_tokens, None) for q in ADDITION.splits["test"][:n(64)]]
    train = random.Random(0).sample(ADDITION.splits["train"], n(8))
    roll = [(ADDITION.messages(q), 0.7, ADDITION.max_tokens, 1000 + i) for q in train for i in range(n(6))]
    words = "the quick brown fox jumps over a lazy dog while seven tired cats watch from the warm roof".split()
    rng = random.Random(1)
    long = [([{"role": "user", "content": " ".join(rng.choice(words) for _ in range(n(240)))}], 1.0,
             n(32), 2000 + i) for i in range(n(32))]
    return {"held_out": held, "rollouts": roll, "long": long}

async def main():
    base_model, dtype, scale = sys.argv[1], sys.argv[2], int(sys.argv[3])
    engine = TransformersEngine(base_model, dtype=None if dtype == "default" else dtype)
    await engine.start()
    threading.Thread(target=watch, daemon=True).start()
    out = {"engine_dtype": str(next(engine.model.parameters()).dtype).removeprefix("torch.")}  # not "auto"
    await engine.chat(ChatRequest(messages=[{"role": "user", "content": "Hi"}], model="m",
                                  sampling=SamplingParams(max_tokens=4)))  # first-call costs, untimed
    for name, reqs in workloads(scale).items():
        walls, extra, tokens = [], [], 0
        for _ in range(3):
            if engine.prefix is not None:
                engine.prefix.drop(None)  # each repeat prefills its prompts again
            await asyncio.sleep(0.05)
            base = rss_mb(); peak[0] = base
            t0 = time.perf_counter()
            replies = await asyncio.gather(*[engine.chat(ChatRequest(
                messages=m, model="m", sampling=SamplingParams(temperature=t, max_tokens=n, seed=s)))
                for m, t, n, s in reqs])
            walls.append(time.perf_counter() - t0)
            await asyncio.sleep(0.05)
            extra.append(peak[0] - base)
            tokens = sum(r["usage"]["completion_tokens"] for r in replies)
        out[name] = {"requests": len(reqs), "completion_tokens": tokens, "wall_s": round(statistics.median(walls), 2),
                     "walls_s": [round(w, 2) for w in walls], "peak_extra_mb": max(extra)}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    await engine.stop()
    import art_train
    print("RESULT " + json.dumps({"art_train": art_train.__file__, **out}), flush=True)

asyncio.run(main())
'''



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs="+", default=[str(ROOT)])
    parser.add_argument("--dtypes", default="default,float32", help="engine dtypes, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="this tree, tiny model, few requests; to --out or a temp file")
    parser.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    args = parser.parse_args()
    base_model, scale, out_path = "smollm2-135m", 1, args.out or RESULTS
    if args.smoke:
        from _smoke import smoke_out, tiny_model

        base_model, scale, args.trees, args.dtypes = tiny_model(), 8, [str(ROOT)], "default"
        out_path = smoke_out(args.out, "engine_batch.json")
    runs = []
    for tree in args.trees:
        path = Path(tree).resolve()
        for dtype in args.dtypes.split(","):
            result = run_in_tree(path, ONE_TREE, base_model, dtype, str(scale))
            runs.append({"tree": str(path), "commit": short_commit(path), "dtype": dtype, **result})
            print(json.dumps(runs[-1]), flush=True)
    doc = {"benchmark": f"embedded engine on a batch ({base_model})", "cpu_isa": cpu_isa(),
           "command": "flock /tmp/art-heavy.lock .venv/bin/python benchmarks/engine_batch.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs}
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
