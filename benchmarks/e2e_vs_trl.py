"""End to end against TRL: `art demo`'s addition task trained by ART's loop and by TRL's GRPOTrainer.

Both arms take the demo's recipe from the demo itself (art_train.demo.DEFAULTS["addition"], the task's
max_tokens, the LoRA of art.ModelConfig()): smollm2-135m, 16 steps of 8 training questions x 6 replies
at temperature 0.7, learning rate 3e-4 (constant, AdamW, grad norm 1.0), GRPO with per-sequence mean,
clip 0.2, no KL, advantages scaled by the group's std; float32 on CPU, no gradient checkpointing.
Each step trains on the same questions in both arms (the demo's draw: random.Random(seed).sample).

  art  the demo's loop: LocalBackend with its embedded engine, rollouts through the OpenAI endpoint,
       `model.train`; held-out scores from art.PeriodicEval over the demo's eval rollout.
  trl  trl.GRPOTrainer with its own generation (model.generate, no vLLM), the demo's reward; held-out
       scores from a TrainerCallback: greedy model.generate on the same prompts and chat template,
       the same 16 new tokens, scored by the demo's reward.

Held-out: the demo's 64 test questions, greedy, at step 0 and every --eval-every steps and the last.
The training clock (`train_wall_s`) counts rollouts/generation and training only: model loading and
held-out evaluation are left out in both arms. Target: the demo's (benchmarks/demo.py), held-out mean
- the arm's own step-0 mean >= 0.25; time to target is the clock at the first checkpoint that meets it.
`speedup` = TRL's median time to target / ART's. Each arm and seed runs in a fresh child process
(peak RSS is its own, ru_maxrss).

Run (heavy, tens of minutes: under the shared lock):
    flock /tmp/art-heavy.lock .venv/bin/python benchmarks/e2e_vs_trl.py [--seeds 0,1] [--arms art,trl]
Writes benchmarks/results/e2e_vs_trl.json. `--smoke`: the tiny model, 2 steps of 2 x 2, 2 held-out
questions, seed 0, to --out or a temp file (figures mean nothing; the trl arm only where TRL is installed:
the dev extras).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULTS = Path(__file__).parent / "results" / "e2e_vs_trl.json"
MAX_SEQ_LEN = 512  # the demo's ModelConfig(max_seq_len=512)


def settings(smoke: bool, eval_every: int) -> dict[str, Any]:
    """The demo's recipe (smoke: the tiny model and the smallest sizes)."""
    from demo import TARGET_DIFFERENCE

    import art_core as art
    from art_train.demo import DEFAULTS
    from art_train.demo_tasks import ADDITION

    d, lora = DEFAULTS["addition"], art.ModelConfig()
    s = {"base_model": "smollm2-135m", "steps": d["steps"], "groups": d["groups"], "group_size": d["group_size"],
         "learning_rate": d["learning_rate"], "temperature": d["temperature"], "max_tokens": ADDITION.max_tokens,
         "held_out": len(ADDITION.splits["test"]), "eval_every": eval_every, "max_seq_len": MAX_SEQ_LEN,
         "lora": {"r": lora.lora_rank, "alpha": lora.lora_alpha, "dropout": lora.lora_dropout,
                  "target_modules": lora.target_modules},
         "target_gain": TARGET_DIFFERENCE}
    if smoke:
        from _smoke import tiny_model

        s.update(base_model=tiny_model(), steps=2, groups=2, group_size=2, held_out=2, eval_every=1)
    return s


def batches(s: dict[str, Any], seed: int) -> list[list[Any]]:
    """Each step's training questions, drawn as the demo draws them."""
    from art_train.demo_tasks import ADDITION

    rng = random.Random(seed)
    return [rng.sample(ADDITION.splits["train"], s["groups"]) for _ in range(s["steps"])]


class Clock:
    """Training seconds and held-out points: `lap` ends a step, `point` records a held-out score."""

    def __init__(self) -> None:
        self.train_s, self.step_s, self.curve = 0.0, [], []
        self.phases: list[dict[str, float]] = []  # ART: each step's rollouts, train call and its own timings
        self.mark = time.perf_counter()

    def lap(self) -> None:
        now = time.perf_counter()
        self.step_s.append(now - self.mark)
        self.train_s += self.step_s[-1]
        self.mark = now

    def point(self, step: int, held_out: float) -> None:
        self.curve.append([step, round(self.train_s, 2), held_out])
        self.mark = time.perf_counter()  # the evaluation is off the clock

    def due(self, step: int, s: dict[str, Any]) -> bool:
        return step % s["eval_every"] == 0 or step == s["steps"]


async def run_art(s: dict[str, Any], seed: int, work: Path) -> Clock:
    import art_core as art
    from art_train.demo_tasks import ADDITION
    from art_train.local import LocalBackend

    backend = LocalBackend(path=work / ".art")
    model = art.TrainableModel(name=f"e2e-{seed}", project="e2e", base_model=s["base_model"],
                               config=art.ModelConfig(max_seq_len=MAX_SEQ_LEN, seed=seed))
    val = art.PeriodicEval(ADDITION.eval_rollout, ADDITION.splits["test"][:s["held_out"]], every=s["eval_every"],
                           seed=seed, task_id=lambda q: q.id, max_concurrency=64, show_progress=False)
    try:
        await model.register(backend)  # type: ignore[arg-type]  # as art demo does
        clock = Clock()
        clock.point(0, (await val(model)).mean)  # type: ignore[union-attr]
        for step, batch in enumerate(batches(s, seed), start=1):
            t0 = time.perf_counter()
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(ADDITION.rollout(model, q, s["temperature"]) for _ in range(s["group_size"]))
                 for q in batch), show_progress=False)
            t1 = time.perf_counter()
            result = await model.train(groups, config=art.TrainConfig(learning_rate=s["learning_rate"]))
            clock.lap()
            clock.phases.append({"rollouts_s": round(t1 - t0, 3), "train_call_s": round(time.perf_counter() - t1, 3),
                                 **{k.removeprefix("time/"): round(v, 3) for k, v in result.metrics.items()
                                    if k.startswith("time/")}})
            if clock.due(step, s):
                clock.point(step, (await val(model, result, force=True)).mean)  # type: ignore[union-attr]
    finally:
        await backend.close()
    return clock


def held_out_greedy(model: Any, tok: Any, s: dict[str, Any]) -> float:
    """The TRL arm's held-out mean: greedy generate on the demo's prompts, scored by the demo's reward."""
    import torch

    from art_train.demo_tasks import ADDITION, addition_reward

    questions = ADDITION.splits["test"][:s["held_out"]]
    texts = [tok.apply_chat_template(ADDITION.messages(q), tokenize=False, add_generation_prompt=True)
             for q in questions]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=s["max_tokens"], pad_token_id=tok.pad_token_id,
                             temperature=None, top_p=None, top_k=None)
    model.train(was_training)
    replies = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return statistics.fmean(addition_reward(r, q.answer) for r, q in zip(replies, questions, strict=True))


def run_trl(s: dict[str, Any], seed: int, work: Path) -> Clock:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import art_core as art
    from art_train.demo_tasks import ADDITION, addition_reward
    from art_train.models import chat_template_for, load_causal_lm, load_tokenizer, resolve_base_model

    path = resolve_base_model(s["base_model"])
    tok = load_tokenizer(path)
    tok.chat_template = chat_template_for(tok, art.ModelConfig())  # the template ART's engine and trainer use
    tok.padding_side = "left"
    rows = [{"prompt": ADDITION.messages(q), "answer": q.answer} for batch in batches(s, seed) for q in batch]

    def reward(completions: list[list[dict[str, str]]], answer: list[int], **_: Any) -> list[float]:
        return [addition_reward(c[-1]["content"], a) for c, a in zip(completions, answer, strict=True)]

    clock = Clock()

    class HeldOut(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            clock.point(0, held_out_greedy(model, tok, s))

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            clock.lap()
            if clock.due(state.global_step, s):
                clock.point(state.global_step, held_out_greedy(model, tok, s))

    lora = s["lora"]
    config = GRPOConfig(
        output_dir=str(work / "trl"), max_steps=s["steps"], seed=seed, data_seed=seed,
        per_device_train_batch_size=s["groups"] * s["group_size"], gradient_accumulation_steps=1,
        num_generations=s["group_size"], shuffle_dataset=False, max_completion_length=s["max_tokens"],
        temperature=s["temperature"], top_p=1.0, top_k=0,
        learning_rate=s["learning_rate"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, max_grad_norm=1.0,
        loss_type="grpo", beta=0.0, epsilon=0.2, scale_rewards="group", num_iterations=1,
        use_cpu=True, bf16=False, activation_checkpointing=False,
        report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True)
    trainer = GRPOTrainer(
        model=load_causal_lm(path, dtype="float32", device="cpu"), reward_funcs=[reward], args=config,
        train_dataset=Dataset.from_list(rows), processing_class=tok, callbacks=[HeldOut()],
        peft_config=LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                               target_modules=lora["target_modules"], task_type="CAUSAL_LM"))
    trainer.train()
    return clock


def child(arm: str, s: dict[str, Any], seed: int) -> None:
    import asyncio

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"e2e-{arm}-") as work:
        clock = asyncio.run(run_art(s, seed, Path(work))) if arm == "art" else run_trl(s, seed, Path(work))
    rss_kb = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print("RESULT " + json.dumps({"step_s": clock.step_s, "curve": clock.curve, "wall_s": time.perf_counter() - t0,
                                  "phases": clock.phases,
                                  "peak_rss_mb": round(rss_kb / 1024)}), flush=True)


def summarize(raw: dict[str, Any], s: dict[str, Any], seed: int) -> dict[str, Any]:
    """One arm and seed: median step, the held-out curve, the time to the target."""
    curve = raw["curve"]
    base = curve[0][2]
    reached = next((p for p in curve if p[2] - base >= s["target_gain"] - 1e-9), None)
    return {"seed": seed, "steps": len(raw["step_s"]), "step_s_median": round(statistics.median(raw["step_s"]), 3),
            "step_s": [round(x, 3) for x in raw["step_s"]], "curve": curve, "base_held_out": base,
            "final_held_out": curve[-1][2], "train_wall_s": curve[-1][1],
            "time_to_target_s": reached[1] if reached else None, "step_to_target": reached[0] if reached else None,
            "peak_rss_mb": raw["peak_rss_mb"], "process_wall_s": round(raw["wall_s"], 1),
            **({"phases_median": {k: statistics.median(p[k] for p in raw["phases"] if k in p)
                                  for k in raw["phases"][0]}} if raw.get("phases") else {})}


def speedup(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """TRL's median time to target / ART's; None with the reason when a run never reached it."""
    if set(runs) != {"art", "trl"}:
        return {"speedup": None, "speedup_note": "needs both arms"}
    missed = [f"{arm} seed {r['seed']}" for arm, rs in runs.items() for r in rs if r["time_to_target_s"] is None]
    if missed:
        return {"speedup": None, "speedup_note": f"never reached the target: {', '.join(missed)}"}
    art_t = statistics.median(r["time_to_target_s"] for r in runs["art"])
    trl_t = statistics.median(r["time_to_target_s"] for r in runs["trl"])
    return {"speedup": round(trl_t / art_t, 3) if art_t > 0 else None, "speedup_note": None}


def launch(arm: str, seed: int, s: dict[str, Any]) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--child", arm, "--seeds", str(seed), "--settings", json.dumps(s)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out)
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--arms", default="art,trl")
    ap.add_argument("--eval-every", type=int, default=2, help="held-out checkpoints every N steps (and the last)")
    ap.add_argument("--smoke", action="store_true", help="tiny model, 2 steps of 2 x 2, seed 0; to --out or a temp file")
    ap.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--settings", help=argparse.SUPPRESS)
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    if args.child:
        child(args.child, json.loads(args.settings), seeds[0])
        return
    s = settings(args.smoke, args.eval_every)
    out_path = args.out or RESULTS
    if args.smoke:
        from _smoke import smoke_out

        out_path, seeds = smoke_out(args.out, "e2e_vs_trl.json"), [0]
    arms = args.arms.split(",")
    if args.smoke and "trl" in arms and importlib.util.find_spec("trl") is None:  # TRL comes with the dev extras
        print("smoke: TRL is not installed, skipping the trl arm", flush=True)
        arms.remove("trl")
    from scale import machine

    jobs = [(arm, seed) for seed in seeds for arm in arms]
    # smoke: the children start together (their imports overlap; the figures mean nothing); else one at a time
    started = [launch(arm, seed, s) for arm, seed in jobs] if args.smoke else []
    where = machine()
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm, _ in jobs}
    for i, (arm, seed) in enumerate(jobs):
        runs[arm].append(summarize(finish(started[i] if started else launch(arm, seed, s)), s, seed))
        print(arm, seed, {k: v for k, v in runs[arm][-1].items() if k not in ("step_s", "curve")}, flush=True)
    doc = {
        "benchmark": "art demo's addition task, ART's loop vs TRL GRPOTrainer, one run on this CPU"
                     if not args.smoke else "smoke: tiny model, 2 steps (figures mean nothing)",
        "machine": where, "settings": s,
        "clock": "train_wall_s: rollouts/generation + training, model loading and held-out evaluation left out",
        "target": f"held-out mean - the arm's step-0 mean >= {s['target_gain']} (the demo's, benchmarks/demo.py)",
        "runs": runs,
        "median": {arm: {k: statistics.median(r[k] for r in rs) if all(r[k] is not None for r in rs) else None
                         for k in ("step_s_median", "time_to_target_s", "final_held_out", "peak_rss_mb")}
                   for arm, rs in runs.items()},
        **speedup(runs),
        "command": " ".join(["python", "benchmarks/e2e_vs_trl.py", *sys.argv[1:]]),
    }
    doc["met"] = doc["speedup"] is not None and doc["speedup"] >= 3
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
