"""Serving throughput and adapter-swap time on smollm2-135m with a rank-8 LoRA on every projection.

Arms, all in one run, each on the same 32 prompts (~300 tokens, 128 new tokens, temperature 1):
  embedded     art serve (LocalBackend, transformers engine, default dtype: bfloat16 on a CPU with native
               bfloat16, else float32; the trainer stays float32), 32 concurrent HTTP requests
  embedded_fp32  the same with LocalBackend(engine_dtype="float32")
  sequential   the same prompts one at a time with peft + model.generate (float32, and bfloat16)
  hf_batched   all 32 in one left-padded model.generate call (peft; float32, and bfloat16)
  raw_vllm     vLLM's own server serving the adapter, 32 concurrent requests   (needs --vllm-python);
               plain requests, and again with the logprobs/token ids the vllm engine always asks for
  proxy_vllm   art serve with the vllm engine in front of that server          (needs --vllm-python)
Swap: seconds from the end of an optimizer step to the new adapter answering (save + load + the
weight-sync probe + a 1-token reply), per engine.

Run: flock /tmp/art-heavy.lock .venv/bin/python benchmarks/serve.py [--vllm-python .venv-vllm/bin/python]
Smoke (seconds, the tiny model; the vLLM arm on a tiny model vLLM can serve when --vllm-python or ART_VLLM_PYTHON is set):
    .venv/bin/python benchmarks/serve.py --smoke [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import torch  # noqa: E402

import art_core as art  # noqa: E402
from art_train import LocalBackend  # noqa: E402

N, NEW = 32, 128
BASE = "smollm2-135m"
FILLER = ("The history of the region is long and varied, with many small towns along the river, each known "
          "for its market, its bridges and the festivals held every spring. ")


def prompts(tokenizer: Any) -> list[list[dict[str, str]]]:
    out = []
    for i in range(N):
        text = f"Document {i}. " + FILLER * 8 + f"Question {i}: summarise the document above in your own words."
        out.append([{"role": "user", "content": text}])
    return out


# What the vllm engine adds to every request it forwards (the serving contract: token ids and logprobs)
CONTRACT = {"logprobs": True, "return_token_ids": True}


async def concurrent(url: str, model: str, messages: list[list[dict]], api_key: str = "x",
                     extra: dict[str, Any] | None = None) -> tuple[float, int]:
    async with httpx.AsyncClient(base_url=url, timeout=1800, headers={"Authorization": f"Bearer {api_key}"}) as http:
        async def one(m: list[dict]) -> int:
            body = {"model": model, "messages": m, "max_tokens": NEW, "temperature": 1.0, "ignore_eos": True,
                    **(extra or {})}
            r = await http.post("/chat/completions", json=body)
            r.raise_for_status()
            return int(r.json()["usage"]["completion_tokens"])

        t0 = time.perf_counter()
        counts = await asyncio.gather(*[one(m) for m in messages])
        return time.perf_counter() - t0, sum(counts)


def hf_arms(base: Path, adapter: Path, messages: list[list[dict]], template: str, seq_n: int,
            dtype: str = "float32") -> dict[str, float]:
    from peft import PeftModel

    from art_train.models import load_causal_lm, load_tokenizer

    tok = load_tokenizer(base)
    tok.padding_side = "left"
    model = PeftModel.from_pretrained(load_causal_lm(base, dtype, "cpu"), str(adapter)).eval()
    texts = [tok.apply_chat_template(m, chat_template=template, add_generation_prompt=True, tokenize=False)
             for m in messages]
    kw = {"max_new_tokens": NEW, "min_new_tokens": NEW, "do_sample": True, "temperature": 1.0, "top_p": 1.0,
          "pad_token_id": tok.pad_token_id}
    out: dict[str, float] = {}
    with torch.inference_mode():
        t0 = time.perf_counter()
        for text in texts[:seq_n]:
            enc = tok(text, return_tensors="pt", add_special_tokens=False)
            model.generate(**enc, **kw)
        out["sequential_tok_s"] = seq_n * NEW / (time.perf_counter() - t0)
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        out["prompt_tokens_mean"] = float(enc["attention_mask"].sum(1).float().mean())
        t0 = time.perf_counter()
        model.generate(**enc, **kw)
        out["hf_batched_tok_s"] = N * NEW / (time.perf_counter() - t0)
    return out


async def serve_arm(engine: str, home: Path, vllm_python: str | None, engine_dtype: str | None = None,
                    swap_steps: int = 1, throughput: bool = True, base_model: str | None = None) -> dict[str, Any]:
    backend = LocalBackend(path=home, engine=engine, vllm_python=vllm_python, engine_dtype=engine_dtype)
    model = art.TrainableModel(name=f"bench-{engine}-{engine_dtype or 'auto'}", project="bench",
                               base_model=base_model or BASE,
                               config=art.ModelConfig(max_seq_len=2048))
    out: dict[str, Any] = {}
    try:
        await model.register(backend)
        client = model.openai_client()
        # one real GRPO step, so every arm samples from a trained (non-zero) rank-8 adapter
        msgs = [{"role": "user", "content": "Say hello."}]

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                r = await client.chat.completions.create(model=model.served_name(), messages=msgs, max_tokens=16, seed=i)
            traj.reward = float(len(r.choices[0].message.content or "")) / 10
            return traj

        swaps = []
        for _ in range(swap_steps):  # step 1 also copies the model for a new adapter slot; later steps reuse one
            groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout(i) for i in range(4))],
                                                        show_progress=False)
            result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-3), verbose=False)
            t0 = time.perf_counter()
            await client.chat.completions.create(model=model.served_name(), messages=msgs, max_tokens=1)
            first = time.perf_counter() - t0
            save = result.metrics.get("time/save_s", 0.0)  # 0: written in a thread, off the swap's path
            swaps.append({"swap_s": save + result.metrics["time/swap_s"] + first,
                          "save_s": save, "load_and_verify_s": result.metrics["time/swap_s"],
                          "first_reply_s": first, "weight_sync_max_abs_diff": result.metrics["weight_sync/max_abs_diff"]})
        out["swap_s"] = swaps[0]["swap_s"]
        out["swap_parts"] = {k: v for k, v in swaps[0].items() if k != "swap_s"}
        out["swap_steps"] = swaps
        entry = backend.service.entry(model.name)
        out["dtype"] = str(getattr(getattr(entry.engine, "model", None), "dtype", "vllm")).removeprefix("torch.")
        if not throughput:
            return out
        out["adapter_path"] = str(entry.rundir.checkpoint_path(result.step))
        out["template"] = entry.trainer.chat_template
        messages = prompts(None)
        await concurrent(f"{backend.url}/v1", model.served_name(), messages[:4])  # warm up
        runs = []
        for _ in range(1 if engine == "vllm" else 2):  # the vllm arm interleaves its own repeats below
            secs, tokens = await concurrent(f"{backend.url}/v1", model.served_name(), messages)
            runs.append(tokens / secs)
        out["tok_s"], out["tok_s_runs"] = statistics.median(runs), runs
        if engine == "vllm":
            raw_url = f"{entry.engine.url}/v1"
            adapter = entry.swap.adapter(result.step)
            key = entry.engine.api_key  # vLLM's own port answers only the engine's key (else 401)
            await concurrent(raw_url, adapter, messages[:4], api_key=key)
            raw, raw_contract = [], []
            proxy = list(runs)
            for _ in range(2):  # interleave, so drift on a shared machine hits all arms alike
                s, t = await concurrent(raw_url, adapter, messages, api_key=key)
                raw.append(t / s)
                s, t = await concurrent(raw_url, adapter, messages, api_key=key, extra=CONTRACT)
                raw_contract.append(t / s)
                s, t = await concurrent(f"{backend.url}/v1", model.served_name(), messages)
                proxy.append(t / s)
            out["raw_tok_s"] = statistics.median(raw)  # plain requests: what embedded is compared with
            out["raw_contract_tok_s"] = statistics.median(raw_contract)  # the same body the proxy sends
            out["tok_s"] = statistics.median(proxy)
    finally:
        await backend.close()
    return out


async def main() -> None:
    global BASE, N, NEW
    parser = argparse.ArgumentParser()
    parser.add_argument("--vllm-python", default=os.environ.get("ART_VLLM_PYTHON"))
    parser.add_argument("--sequential", type=int, default=8, help="prompts timed one at a time (rate is per token)")
    parser.add_argument("--out", default=None, help="results file (default benchmarks/results/serve.json)")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 4 requests of 4 tokens; to --out or a temp file")
    parser.add_argument("--base-model", default=BASE, help="smoke-test the script on a tiny model folder")
    parser.add_argument("--requests", type=int, default=N)
    parser.add_argument("--new-tokens", type=int, default=NEW)
    parser.add_argument("--only-swap", type=int, default=0, metavar="STEPS",
                        help="only time adapter swaps of the transformers engine over STEPS training steps")
    parser.add_argument("--arms", default="embedded,fp32,hf,vllm",
                        help="comma-separated subset of embedded,fp32,hf,vllm (ratios need their arms)")
    args = parser.parse_args()
    vllm_base = args.base_model
    if args.smoke:
        from _smoke import smoke_out, tiny_model, vllm_tiny_model

        vllm_base = vllm_tiny_model()
        args.base_model, args.requests, args.new_tokens, args.sequential = tiny_model(), 4, 4, 2
        args.out = smoke_out(args.out, "serve.json")
    args.out = args.out or Path(__file__).parent / "results" / "serve.json"
    arms = set(args.arms.split(","))
    BASE, N, NEW = args.base_model, args.requests, args.new_tokens
    torch.manual_seed(0)
    home = Path(tempfile.mkdtemp(prefix="art-bench-serve-"))
    from art_train.models import resolve_base_model

    base = resolve_base_model(BASE)
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "torch": torch.__version__,
                                           "platform": platform.platform()},
                               "workload": {"requests": N, "new_tokens": NEW, "temperature": 1.0, "lora_rank": 8,
                                            "base_model": BASE, "vllm_base_model": vllm_base}}
    if args.only_swap:
        for dtype in (None, "float32"):
            arm = await serve_arm("transformers", home, None, dtype, swap_steps=args.only_swap, throughput=False)
            results[f"swap_steps_transformers_{dtype or 'default'}"] = arm["swap_steps"]
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
        return
    emb = bf = hf = hf16 = vl = None
    if "embedded" in arms or "hf" in arms:  # the hf arms sample from the adapter this arm trained
        emb = await serve_arm("transformers", home, None)
        results["embedded_tok_s"] = emb["tok_s"]
        results["embedded_tok_s_runs"] = emb["tok_s_runs"]
        results["embedded_dtype"] = emb["dtype"]
        results["swap_s_transformers"] = emb["swap_s"]
        results["swap_parts_transformers"] = emb["swap_parts"]
    if "fp32" in arms:
        bf = await serve_arm("transformers", home, None, engine_dtype="float32")
        results["embedded_fp32_tok_s"] = bf["tok_s"]
        results["swap_s_transformers_fp32"] = bf["swap_s"]
        results["swap_parts_transformers_fp32"] = bf["swap_parts"]
    if "hf" in arms and emb is not None:
        hf = await asyncio.to_thread(hf_arms, base, Path(emb["adapter_path"]), prompts(None), emb["template"],
                                     args.sequential)
        results.update(hf)
        hf16 = await asyncio.to_thread(hf_arms, base, Path(emb["adapter_path"]), prompts(None), emb["template"],
                                       args.sequential, "bfloat16")
        results.update({f"{k}_bf16": v for k, v in hf16.items() if k != "prompt_tokens_mean"})
        # the default engine against the best plain transformers does in either dtype
        best_seq = max(hf["sequential_tok_s"], hf16["sequential_tok_s"])
        best_batch = max(hf["hf_batched_tok_s"], hf16["hf_batched_tok_s"])
        results["embedded_vs_sequential"] = results["embedded_tok_s"] / best_seq
        results["embedded_vs_hf_batched"] = results["embedded_tok_s"] / best_batch
        if bf is not None:  # float32 engine against float32 transformers
            results["embedded_fp32_vs_sequential"] = results["embedded_fp32_tok_s"] / hf["sequential_tok_s"]
            results["embedded_fp32_vs_hf_batched"] = results["embedded_fp32_tok_s"] / hf["hf_batched_tok_s"]
    if args.vllm_python and "vllm" in arms:
        vl = await serve_arm("vllm", home, args.vllm_python, base_model=vllm_base)
        results["raw_vllm_tok_s"] = vl["raw_tok_s"]
        results["proxy_vllm_tok_s"] = vl["tok_s"]
        results["swap_s_vllm"] = vl["swap_s"]
        results["swap_parts_vllm"] = vl["swap_parts"]
        results["raw_vllm_with_logprobs_tok_s"] = vl["raw_contract_tok_s"]
        # our server in front of vLLM against vLLM answering the very requests it forwards (logprobs, token ids)
        results["proxy_vs_raw_vllm"] = vl["tok_s"] / vl["raw_contract_tok_s"]
        results["proxy_vs_raw_vllm_plain_requests"] = vl["tok_s"] / vl["raw_tok_s"]
        if emb is not None:
            results["embedded_vs_raw_vllm"] = results["embedded_tok_s"] / vl["raw_tok_s"]
        if bf is not None:
            results["embedded_fp32_vs_raw_vllm"] = results["embedded_fp32_tok_s"] / vl["raw_tok_s"]
    for key in ("embedded_vs_sequential", "embedded_vs_hf_batched", "embedded_vs_raw_vllm", "proxy_vs_raw_vllm",
                "swap_s_transformers", "swap_s_vllm"):
        results.setdefault(key, None)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
