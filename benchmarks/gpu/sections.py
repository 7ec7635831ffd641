"""The measured sections of the GPU run; `bench.py` runs each in its own process.

Each section is `fn(ctx, record)`: `ctx` says the device and sizes, `record(**fields)` adds fields to
the section's result at once (so a section killed by its time limit keeps what it measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapes import SHAPES, model_folder, parameter_count, random_weights

Record = Callable[..., None]
BANDWIDTH = 4.8e12  # H200 HBM3e, bytes/s (the data sheet's figure)


@dataclass
class Ctx:
    device: str  # "cuda" or "cpu"
    tiny: bool  # the CPU twin's sizes
    scratch: Path

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def shape(self, name: str) -> str:
        return "tiny" if self.tiny else name


# -- helpers ---------------------------------------------------------------------------------------
def reset_peak(ctx: Ctx) -> None:
    import torch

    if ctx.cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def memory(ctx: Ctx) -> dict[str, float]:
    """Peak and current memory: GPU allocated bytes on CUDA, else the process's peak RSS (GiB)."""
    import torch

    if ctx.cuda:
        torch.cuda.synchronize()
        return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                "allocated_gib": torch.cuda.memory_allocated() / 2**30,
                "reserved_peak_gib": torch.cuda.max_memory_reserved() / 2**30}
    return {"peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def sync(ctx: Ctx) -> None:
    import torch

    if ctx.cuda:
        torch.cuda.synchronize()


def make_groups(ctx: Ctx, seed: int = 0, n_groups: int = 4, group_size: int = 4, short: bool = False) -> list[Any]:
    """Agent-like rows: prompts of ~1-2k tokens, completions 800-6000 tokens (log-uniform), 2k-8k in all."""
    import art_core as art

    rng = random.Random(seed)
    if ctx.tiny:
        n_groups, group_size = min(n_groups, 2), min(group_size, 2)
    if ctx.tiny or short:
        words, lo, hi = (5, 10), 8, 24
    else:
        words, lo, hi = (350, 700), 800, 6000
    vocab = SHAPES["qwen2.5-0.5b"]["vocab_size"] - 1000
    groups = []
    for g in range(n_groups):
        prompt = " ".join(f"w{rng.randrange(10_000)}" for _ in range(rng.randint(*words)))
        trajs = []
        for k in range(group_size):
            n = int(round(lo * (hi / lo) ** rng.random()))
            ids = [rng.randrange(100, vocab) for _ in range(n)]
            t = art.Trajectory(messages=[{"role": "user", "content": prompt}], reward=float(rng.random()))
            t.turns.append(art.assistant_turn(f"answer {g}.{k}", token_ids=ids, logprobs=[-1.0] * n))
            trajs.append(t)
        groups.append(art.TrajectoryGroup(trajs))
    return groups


def model_config(ctx: Ctx, **kw: Any) -> Any:
    import art_core as art

    return art.ModelConfig(lora_rank=16, lora_alpha=32, max_seq_len=8704, **kw)


# -- env -------------------------------------------------------------------------------------------
def env(ctx: Ctx, record: Record) -> None:
    import importlib.metadata as md
    import platform

    versions = {}
    for p in ("torch", "transformers", "peft", "accelerate", "trl", "pydantic", "openai", "fastapi", "uvicorn"):
        try:
            versions[p] = md.version(p)
        except md.PackageNotFoundError:
            versions[p] = None
    info: dict[str, Any] = {"python": platform.python_version(), "versions": versions, "cpus": os.cpu_count()}
    record(**info)
    import torch

    if ctx.cuda:
        props = torch.cuda.get_device_properties(0)
        info |= {"gpu": props.name, "gpu_memory_gib": props.total_memory / 2**30, "capability": f"{props.major}.{props.minor}",
                 "cuda": torch.version.cuda, "bf16": torch.cuda.is_bf16_supported()}
    record(**info)
    import art_core  # noqa: F401  - the project imports on this machine
    import art_train.local  # noqa: F401
    import art_train.server  # noqa: F401

    record(art_imports="ok")


# -- the GRPO step -----------------------------------------------------------------------------------
def step_ours(ctx: Ctx, record: Record, shape: str, gradient_checkpointing: bool = True) -> None:
    """One GRPO step of ART's Trainer (bf16 weights, fp32 LoRA r=16 on all projections) on the rows."""
    import art_core as art
    from art_train.trainer import Trainer

    shape = ctx.shape(shape)
    folder = model_folder(shape, ctx.scratch)
    config = model_config(ctx, gradient_checkpointing=gradient_checkpointing)
    model = art.TrainableModel(name="bench", project="gpu", base_model=str(folder), config=config)
    t0 = time.perf_counter()
    with random_weights(ctx.device):
        trainer = Trainer(model, art.RunDir("gpu", "bench", root=str(ctx.scratch / f"run-{shape}-{time.time_ns()}")),
                          device=ctx.device)
    record(shape=shape, parameters=parameter_count(shape), load_s=time.perf_counter() - t0,
           gradient_checkpointing=gradient_checkpointing, dtypes=dtypes(trainer))
    # rows packed to max_seq_len, as the trainer does on a GPU by default (the twin on CPU too: same path)
    tc = art.TrainConfig(learning_rate=1e-5, max_seq_len=8704, pack_tokens=8704 if ctx.tiny else None)
    trainer.train(make_groups(ctx, seed=1, n_groups=1, short=True), tc)  # warm-up (kernels, allocator)
    groups = make_groups(ctx)
    reset_peak(ctx)
    t0 = time.perf_counter()
    result = trainer.train(groups, tc)
    sync(ctx)
    wall = time.perf_counter() - t0
    m = result.metrics
    seconds = m["time/forward_backward_s"] + m["time/tokenize_s"]
    record(tokens=m["trained_tokens"], seconds=seconds, step_wall_s=wall, tokens_per_s=m["trained_tokens"] / seconds,
           rows=sum(len(g.trajectories) for g in groups), **memory(ctx),
           metrics={k: v for k, v in m.items() if k.startswith("time/")}, optimizer_state=optimizer_dtypes(trainer))


def dtypes(trainer: Any) -> dict[str, list[str]]:
    """The dtypes and devices of the trainer's frozen and trainable parameters."""
    frozen, trainable, devices = set(), set(), set()
    for p in trainer.peft.parameters():
        (trainable if p.requires_grad else frozen).add(str(p.dtype))
        devices.add(str(p.device))
    return {"frozen": sorted(frozen), "trainable": sorted(trainable), "devices": sorted(devices)}


def optimizer_dtypes(trainer: Any) -> list[str]:
    return sorted({str(v.dtype) for s in trainer.optimizer.state.values() for v in s.values() if hasattr(v, "dtype")})


def step_trl(ctx: Ctx, record: Record, shape: str, micro_batch: int = 8) -> None:
    """TRL's GRPOTrainer loss and backward on the same rows (benchmarks/train_step.py's TRL arm, on `device`).

    Padded micro-batches, gradient checkpointing, full-vocabulary logits over the completion, TRL's
    `selective_log_softmax` and `GRPOTrainer._compute_loss`. Out of memory: the micro-batch halves.
    """
    import torch

    shape = ctx.shape(shape)
    trl = trl_parts()
    record(shape=shape, datasets_pandas=trl["stubbed"])
    from peft import LoraConfig, get_peft_model

    import art_core as art
    from art_train.models import chat_template_for, load_causal_lm, load_tokenizer
    from art_train.trainer import step_advantages

    folder = model_folder(shape, ctx.scratch)
    tok = load_tokenizer(folder)
    template = chat_template_for(tok, art.ModelConfig())
    with random_weights(ctx.device):
        base = load_causal_lm(folder, dtype="bfloat16" if ctx.cuda else "float32", device=ctx.device)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=art.ModelConfig().target_modules,
                                            task_type="CAUSAL_LM"))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model.train()

    def rows_of(groups: list[Any]) -> list[tuple[list[int], list[int], float]]:
        rows = []
        for g, a in zip(groups, step_advantages(groups), strict=True):
            for t, adv in zip(g.trajectories, a.advantages, strict=True):
                text = tok.apply_chat_template(t.messages()[:-1], chat_template=template, tokenize=False,
                                               add_generation_prompt=True)
                rows.append((tok(text, add_special_tokens=False)["input_ids"], t.turns[-1]["sample"]["token_ids"], adv))
        return rows

    def one_pass(rows: list[Any], mb: int) -> int:
        tokens = 0
        n_steps = (len(rows) + mb - 1) // mb
        for s in range(0, len(rows), mb):
            tokens += trl_micro_batch(trl, model, tok, rows[s:s + mb], n_steps, ctx.device)
        return tokens

    one_pass(rows_of(make_groups(ctx, seed=1, n_groups=1, short=True)), micro_batch)  # warm-up
    rows = rows_of(make_groups(ctx))
    lengths = [len(p) + len(c) for p, c, _ in rows]
    record(rows=len(rows), row_tokens_min=min(lengths), row_tokens_max=max(lengths))
    while True:
        model.zero_grad(set_to_none=True)
        if ctx.cuda:
            torch.cuda.empty_cache()  # after an out-of-memory retry, once the failed pass's frames are gone
        reset_peak(ctx)
        t0 = time.perf_counter()
        try:
            tokens = one_pass(rows, micro_batch)
            sync(ctx)
        except torch.OutOfMemoryError:
            if micro_batch == 1:
                raise
            record(**{f"oom_at_micro_batch_{micro_batch}": True})
            micro_batch //= 2
            continue
        seconds = time.perf_counter() - t0
        record(micro_batch=micro_batch, tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds, **memory(ctx))
        return


def trl_parts() -> dict[str, Any]:
    """TRL's GRPOTrainer and selective_log_softmax; `datasets` and `pandas` stubbed where not installed
    (the GPU machine has none of datasets, pandas, pyarrow, too large to carry; the loss uses none)."""
    from stubs import hide, stub_missing

    if os.environ.get("ART_GPU_BENCH_HIDE"):  # the CPU twin's test: packages missing as on the GPU machine
        hide(os.environ["ART_GPU_BENCH_HIDE"].split(","))
    stubbed = stub_missing()
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import selective_log_softmax

    return {"GRPOTrainer": GRPOTrainer, "selective_log_softmax": selective_log_softmax, "stubbed": stubbed}


def trl_micro_batch(trl: dict[str, Any], model: Any, tok: Any, mb: list[Any], n_steps: int, device: str) -> int:
    from collections import defaultdict
    from types import SimpleNamespace

    import torch

    pl, cl = max(len(p) for p, _, _ in mb), max(len(c) for _, c, _ in mb)
    pad = tok.pad_token_id
    prompt_ids = torch.tensor([[pad] * (pl - len(p)) + p for p, _, _ in mb], device=device)  # left-padded like TRL
    prompt_mask = torch.tensor([[0] * (pl - len(p)) + [1] * len(p) for p, _, _ in mb], device=device)
    completion_ids = torch.tensor([c + [pad] * (cl - len(c)) for _, c, _ in mb], device=device)
    completion_mask = torch.tensor([[1] * len(c) + [0] * (cl - len(c)) for _, c, _ in mb], device=device)
    selective = trl["selective_log_softmax"]

    def logps(model_: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **_: Any) -> Any:
        logits = model_(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1).logits
        lp = selective(logits[:, :-1, :], input_ids[:, -logits_to_keep:])
        return lp, torch.zeros_like(lp).detach(), None

    class Acc:
        num_processes = 1

        def gather(self, x: Any) -> Any:
            return x

        gather_for_metrics = gather

        def reduce(self, x: Any, reduction: str = "sum") -> Any:
            return x

    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=logps, aux_loss_enabled=False, top_entropy_quantile=1.0,
        off_policy_mask_threshold=None, importance_sampling_level="token", beta=0.0,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1), loss_type="grpo",
        epsilon_low=0.2, epsilon_high=0.2, use_vllm=False, vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=n_steps, max_completion_length=cl,
        accelerator=Acc(), _entropy_bonus_enabled=False, _metrics={"train": defaultdict(list)},
    )
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask,
              "advantages": torch.tensor([a for _, _, a in mb], dtype=torch.float32, device=device)}
    trl["GRPOTrainer"]._compute_loss(fake, model, inputs).backward()
    return int(completion_mask.sum())


# -- the embedded engine -----------------------------------------------------------------------------
def make_adapter(ctx: Ctx, folder: Path, out: Path) -> Path:
    """A LoRA r=16 on all projections with small random B (a trained adapter's shape and cost)."""
    import torch
    from peft import LoraConfig, get_peft_model

    import art_core as art
    from art_train.models import load_causal_lm

    with random_weights(ctx.device):
        base = load_causal_lm(folder, dtype="float32", device="cpu") if not ctx.cuda else \
            load_causal_lm(folder, dtype="bfloat16", device=ctx.device)
    peft = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=art.ModelConfig().target_modules,
                                           task_type="CAUSAL_LM"))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 1e-3)
    peft.save_pretrained(out)
    del peft, base
    if ctx.cuda:
        torch.cuda.empty_cache()
    return out


def engine_decode(ctx: Ctx, record: Record, shape: str = "qwen2.5-0.5b") -> None:
    """Decode tokens/s of the embedded engine at 1, 16 and 64 concurrent requests with a LoRA, against
    batched HF generate with the same LoRA merged; and the bandwidth fraction (weights bytes per step)."""
    import torch

    from art_train.engines.base import ChatRequest, SamplingParams
    from art_train.engines.transformers import TransformersEngine

    shape = ctx.shape(shape)
    folder = model_folder(shape, ctx.scratch)
    adapter = make_adapter(ctx, folder, ctx.scratch / f"adapter-{shape}")
    new_tokens = 8 if ctx.tiny else 128
    levels = (1, 4, 16) if ctx.tiny else (1, 16, 64)
    dtype = "bfloat16" if ctx.cuda else None
    engine = TransformersEngine(str(folder), device=ctx.device, dtype=dtype, max_batch=64, max_seq_len=4096)

    def prompt(i: int) -> str:
        return f"Request {i}: " + " ".join(f"w{(i * 7919 + k) % 10_000}" for k in range(40))

    async def serve() -> None:
        with random_weights(ctx.device):
            await engine.start()
        await engine.load_adapter("lora", adapter)
        weight_bytes = sum(p.numel() * p.element_size() for p in engine.model.parameters())
        record(shape=shape, engine_dtype=str(next(engine.model.parameters()).dtype), weight_bytes=weight_bytes,
               new_tokens=new_tokens)

        async def run(c: int, n: int, tag: int) -> tuple[int, float, int]:
            reqs = [ChatRequest(messages=[{"role": "user", "content": prompt(tag * 1000 + i)}], model="m",
                                adapter="lora", sampling=SamplingParams(max_tokens=n, ignore_eos=True, seed=i))
                    for i in range(c)]
            steps0 = engine.stats["decode_steps"]
            t0 = time.perf_counter()
            replies = await asyncio.gather(*(engine.chat(r) for r in reqs))
            wall = time.perf_counter() - t0
            return sum(r["usage"]["completion_tokens"] for r in replies), wall, engine.stats["decode_steps"] - steps0

        await run(2, 4, 0)  # warm-up: merges the adapter, compiles nothing, warms kernels
        for c in levels:
            tokens, wall, steps = await run(c, new_tokens, c)
            step_s = wall / max(steps, 1)
            record(**{f"engine_{c}": {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                                      "decode_steps": steps, "step_ms": step_s * 1e3,
                                      "bandwidth_fraction": weight_bytes / step_s / BANDWIDTH}})
        await engine.stop()

    asyncio.run(serve())
    record(**memory(ctx))
    engine.model = engine.base = None  # stopped: its memory can go before generate's model loads
    engine._models.clear()
    if ctx.cuda:
        torch.cuda.empty_cache()
    hf_generate(ctx, record, folder, adapter, levels, new_tokens, prompt)


def hf_generate(ctx: Ctx, record: Record, folder: Path, adapter: Path, levels: tuple[int, ...], new_tokens: int,
                prompt: Callable[[int], str]) -> None:
    import torch
    from peft import PeftModel

    from art_train.models import load_causal_lm, load_tokenizer

    tok = load_tokenizer(folder)
    tok.padding_side = "left"
    with random_weights(ctx.device):
        base = load_causal_lm(folder, dtype="bfloat16" if ctx.cuda else "float32", device=ctx.device)
    model = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload().eval()

    def run(c: int, n: int) -> float:
        texts = [tok.apply_chat_template([{"role": "user", "content": prompt(c * 1000 + i)}], tokenize=False,
                                         add_generation_prompt=True) for i in range(c)]
        batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(ctx.device)
        sync(ctx)
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(**batch, max_new_tokens=n, min_new_tokens=n, do_sample=True, pad_token_id=tok.pad_token_id)
        sync(ctx)
        return time.perf_counter() - t0

    run(2, 4)
    for c in levels:
        wall = run(c, new_tokens)
        record(**{f"hf_generate_{c}": {"tokens": c * new_tokens, "wall_s": wall, "tokens_per_s": c * new_tokens / wall}})


# -- weight sync and the whole loop ------------------------------------------------------------------
PROMPT = [{"role": "user", "content": "Write one sentence about the sea."}]


@contextlib.contextmanager
def backend_for(ctx: Ctx, shape: str, name: str) -> Iterator[tuple[Any, Any]]:
    import art_core as art
    from art_train import LocalBackend

    folder = model_folder(ctx.shape(shape), ctx.scratch)
    with random_weights(ctx.device):
        backend = LocalBackend(path=ctx.scratch / f"art-{name}-{time.time_ns()}", device=ctx.device)
        model = art.TrainableModel(name=name, project="gpu", base_model=str(folder), config=model_config(ctx))
        yield backend, model


async def rollouts(model: Any, groups: int, size: int, max_tokens: int, seed: int) -> list[Any]:
    import art_core as art

    client = model.openai_client()

    async def rollout(i: int) -> Any:
        with art.capture() as traj:
            await client.chat.completions.create(model=model.served_name(), messages=PROMPT, max_tokens=max_tokens,
                                                 seed=seed * 100 + i, extra_body={"ignore_eos": True})
        traj.reward = float(i % 2)
        return traj

    return await art.gather_trajectory_groups(
        [art.TrajectoryGroup(rollout(g * size + k) for k in range(size)) for g in range(groups)], show_progress=False)


def weight_sync(ctx: Ctx, record: Record, shape: str = "qwen2.5-0.5b") -> None:
    """bf16 on CUDA: a correct load passes (the max |dlogprob| is the tolerance needed), and step 0 loaded
    under the new step's name (learning rate 1e-5) is caught, with the identity check and by the probe alone."""
    import art_core as art
    from art_train.service import WeightSyncError
    from tests.reliability.test_weight_sync import (  # the faults the tests inject
        engine_loads,
        without_identity,
    )

    lr = art.TrainConfig(learning_rate=1e-5)
    tokens = 8 if ctx.tiny else 32

    async def main() -> None:
        with backend_for(ctx, shape, "sync") as (backend, model):
            try:
                await model.register(backend)
                service = backend.service
                entry = service.entry("sync")
                record(engine_dtype=entry.engine.dtype, tolerance=entry.swap.tolerance,
                       reference_dtype=entry.engine.sync_reference_dtype)
                try:
                    ok = await model.train(await rollouts(model, 1, 4, tokens, 1), config=lr, verbose=False)
                except WeightSyncError as exc:  # a correct load failed: the finding; the stale cases mean nothing now
                    record(correct={"failed": str(exc)[:1000]})
                    raise
                record(correct={k: v for k, v in ok.metrics.items() if k.startswith("weight_sync/")})
                for step, identity in ((2, True), (3, False)):
                    label = "stale_identity" if identity else "stale_probe_only"
                    try:
                        blind = contextlib.nullcontext() if identity else without_identity(backend, "sync")
                        with engine_loads(backend, "sync", step, 0), blind:
                            result = await model.train(await rollouts(model, 1, 4, tokens, step), config=lr,
                                                       verbose=False)
                    except WeightSyncError as exc:
                        record(**{label: {"caught": True, "message": str(exc)[:600]}})
                        passed = await backend._call(entry.swap.load_and_verify(step))
                        entry.swap.step = step
                        record(**{f"{label}_then_correct_load": {k: v for k, v in passed.items()
                                                                 if k.startswith("weight_sync/")}})
                    else:
                        m = result.metrics
                        record(**{label: {"caught": False, "distinguishable": m.get("weight_sync/distinguishable"),
                                          "metrics": {k: v for k, v in m.items() if k.startswith("weight_sync/")}}})
            finally:
                await backend.close()

    asyncio.run(main())


def loop(ctx: Ctx, record: Record, shape: str = "qwen2.5-0.5b", steps: int = 3) -> None:
    """The whole loop on LocalBackend: register, serve, rollouts, train, swap, verify; per-phase times."""
    import art_core as art
    from art_train.service import WeightSyncError

    max_tokens = 8 if ctx.tiny else 128
    tc = art.TrainConfig(learning_rate=1e-5)
    failed: list[int] = []

    async def main() -> None:
        with backend_for(ctx, shape, "loop") as (backend, model):
            try:
                t0 = time.perf_counter()
                await model.register(backend)
                record(register_s=time.perf_counter() - t0, shape=ctx.shape(shape))
                for step in range(1, steps + 1):
                    t0 = time.perf_counter()
                    groups = await rollouts(model, *((2, 4) if ctx.tiny else (4, 8)), max_tokens, step)
                    t_roll = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    try:
                        result = await model.train(groups, config=tc, verbose=False)
                    except WeightSyncError as exc:  # recorded; the loop goes on serving the previous step
                        record(**{f"step_{step}": {"rollouts_s": t_roll, "weight_sync_failed": str(exc)[:1000]}})
                        failed.append(step)
                        continue
                    t_train = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    served = await model.get_step()
                    reply = await model.openai_client().chat.completions.create(
                        model=model.served_name(), messages=PROMPT, max_tokens=4)
                    t_verify = time.perf_counter() - t0
                    m = result.metrics
                    record(**{f"step_{step}": {
                        "rollouts_s": t_roll, "rollouts": sum(len(g.trajectories) for g in groups),
                        "train_s": t_train, "verify_s": t_verify, "served_step": served,
                        "served_model": reply.model, "trained_tokens": m.get("trained_tokens"),
                        "times": {k: v for k, v in m.items() if k.startswith("time/")},
                        "weight_sync": {k: v for k, v in m.items() if k.startswith("weight_sync/")}}})
                    if served != step and not failed:
                        raise RuntimeError(f"after step {step} the backend serves step {served}")
            finally:
                await backend.close()
        record(**memory(ctx))
        if failed:
            raise RuntimeError(f"the weight-sync check failed a correct load at steps {failed} (see step_N)")

    asyncio.run(main())


SECTIONS: dict[str, Callable[..., None]] = {
    "env": env, "step_ours": step_ours, "step_trl": step_trl, "engine": engine_decode,
    "weight_sync": weight_sync, "loop": loop,
}
