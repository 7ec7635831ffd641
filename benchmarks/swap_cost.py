"""What the weight-sync check costs a step: `time/swap_s` (load the new adapter, probe it on both
sides) against `time/step_s` (the GRPO step itself), on one `art demo`-shaped batch.

For each code tree given (default: this one), in its own process: register smollm2-135m on
LocalBackend, sample 8 addition questions x 6 replies at temperature 0.7 from step 0 (seeded, so
every tree trains the same groups), then train two steps on those groups (step 1 probes 2
checkpoints, step 2 three). Trees run one after the other in one invocation, so they can be
compared by ratio on the same machine.

Run (heavy: under the shared lock):
    git worktree add /tmp/art-before <commit>
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/swap_cost.py --trees /tmp/art-before .
Writes benchmarks/results/swap_cost.json. `--smoke`: this tree, the tiny model, 2 questions x 2
replies, seconds, to --out or a temp file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from _trees import run_in_tree, short_commit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "swap_cost.json"

ONE_TREE = r'''
import asyncio, json, random, sys, tempfile, time
import art_core as art
from art_train import LocalBackend
from art_train.demo_tasks import ADDITION

async def main() -> None:
    base_model, n_questions, n_replies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    questions = random.Random(0).sample(ADDITION.splits["train"], n_questions)
    backend = LocalBackend(path=tempfile.mkdtemp())
    model = art.TrainableModel(name="swap", project="bench", base_model=base_model,
                               config=art.ModelConfig(max_seq_len=512, seed=0))
    await model.register(backend)
    client = model.openai_client()

    async def one(q, i):
        with art.capture() as traj:
            r = await client.chat.completions.create(model=model.served_name(), messages=ADDITION.messages(q),
                                                     max_tokens=ADDITION.max_tokens, temperature=0.7, seed=1000 + i)
        traj.reward = ADDITION.score(q, r.choices[0].message.content or "", r.choices[0].finish_reason)
        return traj

    groups = await art.gather_trajectory_groups(
        [art.TrajectoryGroup(one(q, i) for i in range(n_replies)) for q in questions], show_progress=False)
    steps = []
    for _ in range(2):
        t0 = time.perf_counter()
        r = await model.train(groups, config=art.TrainConfig(learning_rate=3e-4), verbose=False)
        steps.append({"step": r.step, "wall_s": round(time.perf_counter() - t0, 2),
                      "swap_s": round(r.metrics["time/swap_s"], 2), "train_step_s": round(r.metrics["time/step_s"], 2),
                      "probe_tokens": r.metrics.get("weight_sync/probe_tokens"), "rows": r.metrics.get("rows")})
    await backend.close()
    import art_train
    print("RESULT " + json.dumps({"art_train": art_train.__file__, "steps": steps}), flush=True)

asyncio.run(main())
'''



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs="+", default=[str(ROOT)])
    parser.add_argument("--smoke", action="store_true", help="this tree, tiny model, 2 x 2 replies; to --out or a temp file")
    parser.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    args = parser.parse_args()
    shape, out_path = ("smollm2-135m", 8, 6), args.out or RESULTS
    if args.smoke:
        from _smoke import smoke_out, tiny_model

        shape, args.trees, out_path = (tiny_model(), 2, 2), [str(ROOT)], smoke_out(args.out, "swap_cost.json")
    runs = []
    for tree in args.trees:
        path = Path(tree).resolve()
        steps = run_in_tree(path, ONE_TREE, *map(str, shape))["steps"]
        runs.append({"tree": str(path), "commit": short_commit(path), "steps": steps,
                     "swap_s_total": round(sum(s["swap_s"] for s in steps), 2)})
        print(json.dumps(runs[-1]), flush=True)
    doc = {"benchmark": f"weight-sync cost per step ({shape[1]} questions x {shape[2]} replies, {shape[0]})",
           "command": "flock /tmp/art-heavy.lock .venv/bin/python benchmarks/swap_cost.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs}
    if len(runs) > 1:
        doc["swap_ratio_last_over_first"] = round(runs[-1]["swap_s_total"] / runs[0]["swap_s_total"], 3)
        doc["median_swap_s"] = {r["commit"]: statistics.median(s["swap_s"] for s in r["steps"]) for r in runs}
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
