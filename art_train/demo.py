"""`art demo`: train smollm2-135m to answer briefly, through the same public API a user would write.

The task: short questions whose answer is one word or a number. The reward is computed from the
reply alone (no judge): 1.0 for a reply of at most a few words that ends on its own, falling
linearly with length, 0 when it runs out of tokens or says nothing. It rewards brevity, not
correctness: after training the answers are short, and not always right. SmolLM2 starts out
chatty, so the reward has room to rise, and brevity is learnt within a few GRPO steps.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import art_core as art

__all__ = ["QUESTIONS", "brevity_reward", "run_demo"]

console = Console()

QUESTIONS = [
    "What is the capital of France?", "How many legs does a spider have?", "What color is the sky on a clear day?",
    "What is 7 times 8?", "Which planet is closest to the sun?", "What is the opposite of hot?",
    "How many days are in a week?", "What is the chemical symbol for gold?", "What animal says moo?",
    "What is the largest ocean on Earth?", "What is 15 plus 27?", "Who wrote Romeo and Juliet?",
    "What gas do plants breathe in?", "How many continents are there?", "What is frozen water called?",
    "What is the square root of 81?", "Which month comes after June?", "What language is spoken in Brazil?",
    "What is the tallest animal?", "How many hours are in a day?", "What is the boiling point of water in Celsius?",
    "What shape has three sides?", "What is the capital of Japan?", "What do bees make?",
]
SYSTEM = "Answer the question."
MAX_TOKENS = 40


def brevity_reward(text: str, finish_reason: str | None) -> float:
    """1.0 for a finished reply of 1-3 words, falling to 0 at 30 words; 0 when cut off or empty."""
    words = len(text.split())
    if finish_reason == "length" or words == 0:
        return 0.0
    return max(0.0, min(1.0, 1.0 - (words - 3) / 27))


async def rollout(model: art.TrainableModel, client: Any, question: str) -> art.Trajectory:
    with art.capture() as traj:
        r = await client.chat.completions.create(
            model=model.served_name(), max_tokens=MAX_TOKENS, temperature=1.0,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
    choice = r.choices[0]
    traj.reward = brevity_reward(choice.message.content or "", choice.finish_reason)
    traj.metrics["words"] = len((choice.message.content or "").split())
    return traj


def plot(history: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([h["step"] for h in history], [h["reward"] for h in history], marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward (rollouts before the step)")
    ax.set_title("art demo: brevity reward")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


async def demo(steps: int, output: Path, base_model: str, groups: int, group_size: int, lr: float, seed: int) -> list[dict]:
    from .local import LocalBackend

    rng = random.Random(seed)
    output.mkdir(parents=True, exist_ok=True)
    backend = LocalBackend(path=output / ".art")
    # short rows: the trainer packs up to max_seq_len tokens into one forward pass; with the default
    # 4096 the demo peaked at 17.9 GB RSS, with 512 at 10.8 GB (measured on 2 cores)
    model = art.TrainableModel(name=f"demo-{int(time.time())}", project="demo", base_model=base_model,
                               config=art.ModelConfig(max_seq_len=512))
    history: list[dict[str, float]] = []
    table = Table(title="art demo")
    for col in ("step", "reward mean", "words", "loss", "seconds"):
        table.add_column(col, justify="right")
    try:
        with console.status("loading the model (the first run converts smollm2-135m once)"):
            await model.register(backend)
        client = model.openai_client()
        for step in range(steps):
            t0 = time.perf_counter()
            batch = rng.sample(QUESTIONS, groups)
            gathered = await art.gather_trajectory_groups(
                (art.TrajectoryGroup(rollout(model, client, q) for _ in range(group_size)) for q in batch),
                pbar_desc=f"step {step + 1}/{steps} rollouts")
            metrics = art.group_metrics(gathered)
            result = await model.train(gathered, config=art.TrainConfig(learning_rate=lr))
            seconds = time.perf_counter() - t0
            row = {"step": step + 1, "reward": metrics["reward_mean"], "words": metrics.get("metric/words", 0.0),
                   "loss": float(result.metrics.get("loss", float("nan"))), "seconds": seconds}
            history.append(row)
            table.add_row(str(step + 1), f"{row['reward']:.3f}", f"{row['words']:.1f}", f"{row['loss']:.4f}",
                          f"{seconds:.1f}")
            console.print(f"step {step + 1}: reward {row['reward']:.3f}, {row['words']:.1f} words, {seconds:.1f}s")
    finally:
        await backend.close()
    console.print(table)
    if history:
        plot(history, output / "reward.png")
        console.print(f"run directory: {output / '.art' / 'demo' / 'models' / model.name}")
        console.print(f"reward curve: {output / 'reward.png'}")
    return history


def run_demo(args: argparse.Namespace) -> int:
    history = asyncio.run(demo(
        steps=args.steps or 16, output=Path(args.output), base_model=args.model, groups=args.groups or 6,
        group_size=args.group_size or 6, lr=args.learning_rate or 3e-4, seed=args.seed))
    if len(history) >= 2:
        first, last = history[0]["reward"], history[-1]["reward"]
        console.print(f"reward went from {first:.3f} to {last:.3f}")
    return 0
