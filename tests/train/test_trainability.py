"""Trainability: the whole learning path must raise a held-out reward, on the tiny model, in seconds.

Unit tests check the parts (advantages, losses, masks, the weight-sync probe); these check that
the parts add up to learning. A sign error in the advantages, an all-zero loss mask, an optimizer
that never steps, or an engine that keeps serving stale weights each leave the held-out reward
where it started, and the assertion below fails.

The task: reply with tokens from a set S of half the vocabulary. S is the tokens whose embedding
points along one fixed random direction, so a LoRA can favour all of S at once by moving the last
hidden state along it. The tiny model is the test suite's random Llama with its (tied) embeddings
scaled by 8: at the default init (std 0.02) the logits are so small that no hidden state can move
the output distribution far from uniform. The base model emits S about half the time; held-out
prompts (never trained on) are scored before and after with seeded samples.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

import art_core as art

STEPS = 6
MARGIN = 0.15  # measured rise: +0.34 (0.45 -> 0.79) in 6 steps; the test asks for less than half of it


@pytest.fixture(scope="module")
def steerable_model(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[int]]:
    import torch
    from transformers import AutoModelForCausalLM

    path = tmp_path_factory.mktemp("steerable") / "tiny-x8"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(8.0)
    shutil.copytree(tiny_model_path, path)
    model.save_pretrained(path)
    emb = model.get_input_embeddings().weight.detach()
    direction = torch.randn(emb.shape[1], generator=torch.Generator().manual_seed(0))
    return path, set((emb @ direction > 0).nonzero().flatten().tolist())


WORDS = "apple river stone cloud music paper garden window candle forest silver ocean".split()


async def test_grpo_raises_held_out_reward(steerable_model: tuple[Path, set[int]], tmp_path: Path) -> None:
    from art_train import LocalBackend

    path, target = steerable_model
    rng = random.Random(0)
    prompts = [" ".join(rng.sample(WORDS, 4)) for _ in range(24)]
    train, held_out = prompts[:12], prompts[12:]

    async def rollout(model: art.Model, prompt: str, seed: int | None = None) -> art.Trajectory:
        with art.capture() as traj:
            await client.chat.completions.create(
                model=model.served_name(), max_tokens=8, temperature=1.0, seed=seed,
                messages=[{"role": "user", "content": prompt}])
        (_, sample), = traj.samples()
        traj.reward = sum(t in target for t in sample.token_ids) / max(len(sample.token_ids), 1)
        return traj

    backend = LocalBackend(path=tmp_path / ".art")
    model = art.TrainableModel(name="steer", project="trainability", base_model=str(path),
                               config=art.ModelConfig(max_seq_len=128, seed=0))
    try:
        await model.register(backend)
        client = model.openai_client()
        val = art.PeriodicEval(rollout, held_out, every=STEPS, k=4, seed=0, show_progress=False)
        await val(model)
        for step in range(STEPS):
            batch = rng.sample(train, 4)
            # distinct seeds per rollout: reproducible, yet the 8 samples of a group differ
            groups = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(rollout(model, p, seed=10_000 * step + 100 * g + j) for j in range(8))
                 for g, p in enumerate(batch)), show_progress=False)
            result = await model.train(groups, config=art.TrainConfig(learning_rate=1e-2), verbose=False)
            await val(model, result)
    finally:
        await backend.close()
    base, trained = val.results[0], val.results[STEPS]
    c = art.compare(base, trained)
    print(c.table())
    assert 0.35 <= base.mean <= 0.65, f"the base model should emit S about half the time, got {base.mean:.3f}"
    assert c.diff >= MARGIN and c.ci[0] > 0, (
        f"held-out reward rose by {c.diff:+.3f} (95% CI {c.ci[0]:+.3f}..{c.ci[1]:+.3f}) in {STEPS} GRPO steps; "
        f"expected at least +{MARGIN}. The learning path is broken:\n{c.table()}")
    assert result.metrics["val/reward_mean"] == trained.mean  # val metrics travel in the TrainResult
