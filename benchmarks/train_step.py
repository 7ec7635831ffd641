"""One GRPO training step, ours vs TRL 1.16's GRPOTrainer loss + backward, on the same trajectories.

SmolLM2-135M-Instruct (resolve_base_model("smollm2-135m")), LoRA r=8 on attention and MLP projections,
8 groups x 4 trajectories, prompts 150-400 tokens, completions 50-1200 tokens (log-uniform, like an
agent's), seed 0. Each arm runs in a fresh subprocess (so peak RSS is its own), arms alternate.

TRL arm: TRL's recipe for one step without generation: padded micro-batches of
`--trl-micro-batch` sequences, gradient checkpointing on, full-vocabulary logits over the completion
(`logits_to_keep`), TRL's `selective_log_softmax`, and TRL's own `GRPOTrainer._compute_loss` for the
loss (run on a namespace standing in for the trainer instance), then backward.

The ours arm also records the step's work (`work/decoder_tokens`, `work/decoder_calls`,
`work/decoder_tokens_per_trained_token`: tokens and calls through the decoder), next to its tokens/s.

Usage: python benchmarks/train_step.py [--runs 1] [--arms ours,trl] [--malloc glibc]  (under flock /tmp/art-heavy.lock)
`--malloc` picks both arms' malloc (glibc, tcmalloc, jemalloc or auto, as ART_MALLOC; art_train/allocator.py).
`--autocast bfloat16` runs both arms' matmuls under bfloat16 autocast (TRL's default `bf16=True`; ours
`ModelConfig(autocast=...)`), only sensible on a CPU with native bfloat16. `--recompute-mlp`: ours with
`ModelConfig(recompute_mlp=True)` (art_train/trainer/recompute.py); `--recompute-prompt`: ours with
`ModelConfig(recompute_prompt=True)` (a shared prompt's forward again in backward, art_train/trainer/logprobs.py).
`--flops`: after the timed runs, one more run of ours counts its step's FLOPs (benchmarks/_flops.py: matmuls
and CPU flash attention, recomputation included; slower, not timed), and the machine's matmul limit is
measured in the same invocation (a 2048^3 matmul in float32 and bfloat16): the results give ours's FLOP/s
as a fraction of the limit, and the FLOP/s it would need for 5x TRL's tokens/s. (TRL's arm is not counted:
under torch's FlopCounterMode its step passed 23 GB and was killed on a 24 GiB machine.)
Writes benchmarks/results/train_step.json. `--smoke`: the tiny model, 2 groups x 2 short rows, seconds, to
--out or a temp file (the TRL arm only where TRL is installed: the dev extras).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULTS = Path(__file__).parent / "results" / "train_step.json"
WORK = ("work/decoder_tokens", "work/decoder_calls", "work/decoder_tokens_per_trained_token")
# the benchmark's batch, and the smoke run's (tiny model, seconds)
SHAPES = {"full": {"groups": 8, "group_size": 4, "prompt_words": (75, 200), "completion": (50, 1200)},
          "smoke": {"groups": 2, "group_size": 2, "prompt_words": (5, 10), "completion": (4, 24)}}


def make_groups(vocab_low: int = 100, vocab_high: int = 40000, seed: int = 0, shape: str = "full"):  # noqa: ANN201
    import random

    import art_core as art

    rng = random.Random(seed)
    size = SHAPES[shape]
    low, high = size["completion"]
    groups = []
    for g in range(size["groups"]):
        prompt = " ".join(f"w{rng.randrange(10_000)}" for _ in range(rng.randint(*size["prompt_words"])))  # ~2 tokens a word
        trajs = []
        for k in range(size["group_size"]):
            n = int(round(low * (high / low) ** rng.random()))  # log-uniform low..high
            ids = [rng.randrange(vocab_low, vocab_high) for _ in range(n)]
            t = art.Trajectory(messages=[{"role": "user", "content": prompt}], reward=float(rng.random()))
            t.turns.append(art.assistant_turn(f"answer {g}.{k}", token_ids=ids, logprobs=[-1.0] * n))
            trajs.append(t)
        groups.append(art.TrajectoryGroup(trajs))
    return groups


# ours's memory options, each a ModelConfig flag and a --flag of this script: what it does
OPTIONS = {
    "recompute_mlp": "the MLP's inner activations recomputed in backward",
    "recompute_prompt": "a shared prompt's forward again in backward",
}


def run_ours(base_model: str, shape: str, autocast: str | None, options: dict[str, bool] | None = None,
             run: Callable[[Callable[[], Any]], Any] = lambda f: f()) -> dict:
    import art_core as art
    from art_train.trainer import Trainer

    model = art.TrainableModel(name="bench", project="bench", base_model=base_model,
                               config=art.ModelConfig(autocast=autocast, **(options or {})))
    trainer = Trainer(model, art.RunDir("bench", "bench", root=tempfile.mkdtemp()), device="cpu")
    groups = make_groups(shape=shape)
    result = run(lambda: trainer.train(groups, art.TrainConfig(learning_rate=1e-5, max_seq_len=2048)))
    m = result.metrics
    return {"tokens": m["trained_tokens"], "seconds": m["time/forward_backward_s"] + m["time/tokenize_s"],
            **{k: m[k] for k in WORK}}


def run_trl(micro_batch: int, base_model: str, shape: str, autocast: str | None,
            run: Callable[[Callable[[], Any]], Any] = lambda f: f()) -> dict:
    from collections import defaultdict
    from types import SimpleNamespace

    import torch
    from peft import LoraConfig, get_peft_model
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import selective_log_softmax

    import art_core as art
    from art_train.models import chat_template_for, load_causal_lm, load_tokenizer, resolve_base_model
    from art_train.trainer import step_advantages

    path = resolve_base_model(base_model)
    tok = load_tokenizer(path)
    template = chat_template_for(tok, art.ModelConfig())
    model = get_peft_model(
        load_causal_lm(path, dtype="float32", device="cpu"),
        LoraConfig(
            r=8, lora_alpha=16, target_modules=art.ModelConfig().target_modules, task_type="CAUSAL_LM"
        ),
    )
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model.train()
    groups = make_groups(shape=shape)
    advs = step_advantages(groups)
    rows = []
    for g, a in zip(groups, advs, strict=True):
        for t, adv in zip(g.trajectories, a.advantages, strict=True):
            text = tok.apply_chat_template(
                t.messages()[:-1], chat_template=template, tokenize=False, add_generation_prompt=True
            )
            prompt = tok(text, add_special_tokens=False)["input_ids"]
            rows.append((prompt, t.turns[-1]["sample"]["token_ids"], adv))

    class Acc:
        num_processes = 1

        def gather(self, x):  # noqa: ANN001, ANN202
            return x

        gather_for_metrics = gather

        def reduce(self, x, reduction="sum"):  # noqa: ANN001, ANN202
            return x

    n_steps = (len(rows) + micro_batch - 1) // micro_batch

    def micro_step(mb: list) -> int:
        pl, cl = max(len(p) for p, _, _ in mb), max(len(c) for _, c, _ in mb)
        pad = tok.pad_token_id
        prompt_ids = torch.tensor([[pad] * (pl - len(p)) + p for p, _, _ in mb])  # left-padded like TRL
        prompt_mask = torch.tensor([[0] * (pl - len(p)) + [1] * len(p) for p, _, _ in mb])
        completion_ids = torch.tensor([c + [pad] * (cl - len(c)) for _, c, _ in mb])
        completion_mask = torch.tensor([[1] * len(c) + [0] * (cl - len(c)) for _, c, _ in mb])

        def logps(model_, input_ids, attention_mask, logits_to_keep, **_):  # noqa: ANN001, ANN202
            logits = model_(
                input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1
            ).logits
            logits = logits[:, :-1, :]
            lp = selective_log_softmax(logits, input_ids[:, -logits_to_keep:])
            return lp, torch.zeros_like(lp).detach(), None

        fake = SimpleNamespace(
            _get_per_token_logps_and_entropies=logps,
            aux_loss_enabled=False,
            top_entropy_quantile=1.0,
            off_policy_mask_threshold=None,
            importance_sampling_level="token",
            beta=0.0,
            args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
            loss_type="grpo",
            epsilon_low=0.2,
            epsilon_high=0.2,
            use_vllm=False,
            vllm_importance_sampling_correction=False,
            model=SimpleNamespace(training=True),
            current_gradient_accumulation_steps=n_steps,
            max_completion_length=cl,
            accelerator=Acc(),
            _entropy_bonus_enabled=False,
            _metrics={"train": defaultdict(list)},
        )
        inputs = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": torch.tensor([a for _, _, a in mb], dtype=torch.float32),
        }
        # TRL's bf16=True (its default) is accelerate's autocast around the forward and the loss
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
            loss = GRPOTrainer._compute_loss(fake, model, inputs)
        loss.backward()
        return int(completion_mask.sum())

    t0 = time.perf_counter()
    tokens = run(lambda: sum(micro_step(rows[s : s + micro_batch]) for s in range(0, len(rows), micro_batch)))
    return {"tokens": tokens, "seconds": time.perf_counter() - t0}


def child(arm: str, micro_batch: int, base_model: str, shape: str, autocast: str | None,
          options: dict[str, bool], count: bool = False) -> None:
    from _flops import count_flops

    from art_train.allocator import malloc_library, preload_allocator

    preload_allocator()  # --malloc, through ART_MALLOC: re-runs this child with it preloaded
    flops: dict[str, int] = {}

    def run(step: Callable[[], Any]) -> Any:
        if not count:
            return step()
        result, counted = count_flops(step)
        flops.update(counted)
        return result

    out = (run_ours(base_model, shape, autocast, options, run) if arm == "ours"
           else run_trl(micro_batch, base_model, shape, autocast, run))
    if count:
        out["flops"] = flops
    out["autocast"] = autocast
    out.update({name: on and arm == "ours" for name, on in options.items()})
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["malloc"] = Path(malloc_library() or "unknown").name
    print("RESULT " + json.dumps(out), flush=True)


def flop_rates(flops: dict[str, dict[str, int]], result: dict, runs: dict[str, list[dict]],
               autocast: str | None, small: bool) -> dict:
    """Each arm's counted FLOPs and FLOP/s (at its median tokens/s) against the matmul limit measured now."""
    from _trees import cpu_isa
    from engine_flops import limits

    size, stream_floats = (256, 1024 * 1024) if small else (2048, 128 * 1024 * 1024)
    limit = limits(size, stream_floats, 3)
    dtype = autocast or "float32"
    out: dict[str, Any] = {"isa": cpu_isa(), "limit": limit, "limit_dtype": dtype,
                           "counted": "benchmarks/_flops.py: matmuls and flash attention as run, element-wise ops not"}
    for arm, counted in flops.items():
        seconds = runs[arm][-1]["tokens"] / result[f"{arm}_tokens_per_s"]
        gflops = counted["total"] / seconds / 1e9
        out[arm] = {"gflop": round(counted["total"] / 1e9, 1), "per_op_gflop": {
            k: round(v / 1e9, 1) for k, v in counted.items() if k != "total"},
            "gflops_per_s": round(gflops, 1), "fraction_of_limit": round(gflops / limit["matmul_gflops"][dtype], 3)}
    if "ours" in flops and "trl_tokens_per_s" in result:  # the FLOP/s ours would need at 5x TRL's tokens/s
        need = flops["ours"]["total"] * 5 * result["trl_tokens_per_s"] / runs["ours"][-1]["tokens"] / 1e9
        out["ours_at_5x_trl"] = {"gflops_per_s": round(need, 1),
                                 "fraction_of_limit": round(need / limit["matmul_gflops"][dtype], 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--arms", default="ours,trl")
    ap.add_argument("--trl-micro-batch", type=int, default=8)
    ap.add_argument("--child")
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--smoke", action="store_true", help="tiny model, 2 groups x 2 short rows; to --out or a temp file")
    ap.add_argument("--out", type=Path, default=None, help=f"results file (default {RESULTS})")
    ap.add_argument("--malloc", default="glibc",
                    help="both arms' malloc: glibc (a plain Python process's), tcmalloc, jemalloc or auto "
                         "(ART_MALLOC, art_train/allocator.py: what `art` runs under)")
    ap.add_argument("--autocast", choices=["bfloat16"], default=None,
                    help="both arms' matmuls under torch.autocast to bfloat16 (weights and LoRA stay float32): "
                         "ours ModelConfig(autocast=...), TRL's its default bf16=True; only where the CPU has "
                         "native bfloat16 (AVX512-BF16, AMX)")
    for name, what in OPTIONS.items():
        ap.add_argument("--" + name.replace("_", "-"), action="store_true", help=f"ours with ModelConfig({name}=True): {what}")
    ap.add_argument("--flops", action="store_true",
                    help="then one more, untimed run of ours counting its step's FLOPs, and the machine's matmul limit")
    ap.add_argument("--count-flops", action="store_true", help=argparse.SUPPRESS)  # a child's
    args = ap.parse_args()
    shape = "smoke" if args.smoke else "full"
    options = {name: getattr(args, name) for name in OPTIONS}
    chosen = [name for name, on in options.items() if on]
    if args.child:
        child(args.child, args.trl_micro_batch, args.base_model, shape, args.autocast, options, args.count_flops)
        return
    out_path = args.out or RESULTS
    arms = args.arms.split(",")
    if args.smoke:
        import importlib.util

        from _smoke import smoke_out, tiny_model

        args.base_model, out_path = tiny_model(), smoke_out(args.out, "train_step.json")
        if "trl" in arms and importlib.util.find_spec("trl") is None:  # TRL comes with the dev extras
            print("smoke: TRL is not installed, skipping the trl arm", flush=True)
            arms.remove("trl")
    def run_child(arm: str, *extra: str) -> dict:
        cmd = [sys.executable, __file__, "--child", arm, "--trl-micro-batch", str(args.trl_micro_batch),
               "--base-model", args.base_model] + (["--smoke"] if args.smoke else []) + (
                  ["--autocast", args.autocast] if args.autocast else []) + [
                  "--" + name.replace("_", "-") for name in chosen] + list(extra)
        env = dict(os.environ, ART_MALLOC=args.malloc)
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
        r = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
        print(arm, r, flush=True)
        return r

    runs: dict[str, list[dict]] = {a: [] for a in arms}
    for _ in range(args.runs):
        for arm in arms:  # alternating
            runs[arm].append(run_child(arm))
    flops = {"ours": run_child("ours", "--count-flops")["flops"]} if args.flops and "ours" in arms else {}
    if out_path.exists():  # arms not run this time keep their previous runs (listed in "kept_arms")
        previous = json.loads(out_path.read_text()).get("runs", {})
        kept = [a for a in previous if a not in runs]
        runs.update({a: previous[a] for a in kept})
        arms = list(runs)
    else:
        kept = []
    result: dict = {
        "kept_arms": kept,
        "runs": runs,
        "config": {
            "model": "SmolLM2-135M-Instruct (float32)" if not args.smoke else f"tiny random model {args.base_model}",
            "groups": SHAPES[shape]["groups"],
            "group_size": SHAPES[shape]["group_size"],
            "lora_rank": 8,
            "lora_targets": "q,k,v,o,gate,up,down",
            "device": "cpu",
            "cpu_threads": os.cpu_count(),
            "ours": "TrainConfig(max_seq_len=2048), one sequence per row on CPU, no gradient checkpointing"
                    + "".join(f", ModelConfig({name}=True)" for name in chosen),
            "trl": f"padded micro-batches of {args.trl_micro_batch}, gradient checkpointing on",
            "tokens_per_s": "trained completion tokens / seconds of (tokenize +) forward and backward",
            "peak_rss": "ru_maxrss of a fresh child process per arm",
            "malloc": f"--malloc {args.malloc} (each run records the library it got)",
            "autocast": args.autocast or "none (float32 matmuls)",
        },
    }
    for arm in arms:
        result[f"{arm}_tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in runs[arm])
        result[f"{arm}_peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in runs[arm])
    if "ours" in arms:  # the step's work: deterministic for a given batch and code (no median needed)
        result.update({f"ours_{k}": runs["ours"][-1][k] for k in WORK if k in runs["ours"][-1]})
    if "ours" in arms and "trl" in arms:
        result["ratio"] = result["ours_tokens_per_s"] / result["trl_tokens_per_s"]
        result["rss_ratio"] = result["ours_peak_rss_mb"] / result["trl_peak_rss_mb"]
    if flops:
        result["flops"] = flop_rates(flops, result, runs, args.autocast, small=args.smoke)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
