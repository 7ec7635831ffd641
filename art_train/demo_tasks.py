"""The tasks behind `art demo`: two-digit addition (reward: right or wrong) and brevity.

Addition: "What is 23 + 45? Reply with the number only."; the reward is 1.0 when the last number
in the reply is the sum, else 0. The 4,095 unordered pairs {a, b} of two-digit numbers are shuffled
once with a fixed seed and cut into three splits that never share a pair (so neither 23 + 45 nor
45 + 23 of a test pair is ever trained on): `test` (64 questions, the held-out numbers the demo
reports), `dev` (64, for choosing settings) and `train` (the other 3,967).

Brevity: short general-knowledge questions; the reward falls with the reply's length and is 0 for
a cut-off or empty reply. It rewards being short, not being right.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass
from typing import Any

import art_core as art

__all__ = [
    "ADDITION",
    "BREVITY",
    "DemoTask",
    "Question",
    "addition_questions",
    "addition_reward",
    "brevity_reward",
    "demo_task",
]

SPLIT_SEED = 20261201  # fixes which pairs are test, dev and train; never changes with the demo's --seed
_NUMBER = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Question:
    text: str
    answer: int | None = None  # None for brevity (no right answer checked)
    id: str = ""


@dataclass(frozen=True)
class DemoTask:
    """One `art demo` task: its splits, its reward, and how a rollout is sampled."""

    name: str
    title: str  # what the reward measures, for tables and plots
    splits: dict[str, list[Question]]
    max_tokens: int
    system: str | None = None

    def score(self, question: Question, text: str, finish_reason: str | None) -> float:
        if question.answer is not None:
            return addition_reward(text, question.answer)
        return brevity_reward(text, finish_reason)

    def messages(self, question: Question) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, {"role": "user", "content": question.text}]

    async def rollout(self, model: art.Model, question: Question, temperature: float = 1.0,
                      seed: int | None = None) -> art.Trajectory:
        """Sample one reply and score it; `temperature=0` is greedy (evaluation)."""
        client = _client(model)
        with art.capture() as traj:
            r = await client.chat.completions.create(
                model=model.served_name(), messages=self.messages(question), max_tokens=self.max_tokens,
                temperature=temperature, seed=seed)
        choice = r.choices[0]
        text = choice.message.content or ""
        traj.reward = self.score(question, text, choice.finish_reason)
        traj.metrics["chars"] = len(text)
        traj.metrics["words"] = len(text.split())
        traj.metadata["question"] = question.text
        return traj

    async def eval_rollout(self, model: art.Model, question: Question, seed: int) -> art.Trajectory:
        """Greedy decoding: one deterministic reply per question (the held-out score)."""
        return await self.rollout(model, question, temperature=0.0, seed=seed)


_CLIENTS: dict[tuple[int, str | None, bool], Any] = {}


def _client(model: art.Model) -> Any:
    """One client per endpoint and event loop (a pinned copy of a model shares its endpoint)."""
    key = (id(asyncio.get_running_loop()), model.inference_base_url, model.trainable)
    if key not in _CLIENTS:
        _CLIENTS.clear()  # a new loop (or endpoint): the old clients belong to a finished run
        _CLIENTS[key] = model.openai_client()
    return _CLIENTS[key]


def addition_reward(text: str, answer: int) -> float:
    """1.0 when the last number in `text` equals `answer` ("23 + 45 = 68" counts), else 0.0."""
    numbers = _NUMBER.findall(text.replace(",", ""))
    return 1.0 if numbers and int(numbers[-1]) == answer else 0.0


def brevity_reward(text: str, finish_reason: str | None) -> float:
    """1.0 for a finished reply of 1-3 words, falling to 0 at 30 words; 0 when cut off or empty."""
    words = len(text.split())
    if finish_reason == "length" or words == 0:
        return 0.0
    return max(0.0, min(1.0, 1.0 - (words - 3) / 27))


def addition_questions() -> dict[str, list[Question]]:
    """The three disjoint splits of two-digit addition questions (fixed by `SPLIT_SEED`)."""
    rng = random.Random(SPLIT_SEED)
    pairs = [(a, b) for a in range(10, 100) for b in range(a, 100)]
    rng.shuffle(pairs)
    questions = []
    for a, b in pairs:
        x, y = (a, b) if rng.random() < 0.5 else (b, a)
        questions.append(Question(f"What is {x} + {y}? Reply with the number only.", x + y, f"{x}+{y}"))
    return {"test": questions[:64], "dev": questions[64:128], "train": questions[128:]}


BREVITY_QUESTIONS = [
    "What is the capital of France?", "How many legs does a spider have?", "What color is the sky on a clear day?",
    "What is 7 times 8?", "Which planet is closest to the sun?", "What is the opposite of hot?",
    "How many days are in a week?", "What is the chemical symbol for gold?", "What animal says moo?",
    "What is the largest ocean on Earth?", "What is 15 plus 27?", "Who wrote Romeo and Juliet?",
    "What gas do plants breathe in?", "How many continents are there?", "What is frozen water called?",
    "What is the square root of 81?", "Which month comes after June?", "What language is spoken in Brazil?",
    "What is the tallest animal?", "How many hours are in a day?", "What is the boiling point of water in Celsius?",
    "What shape has three sides?", "What is the capital of Japan?", "What do bees make?",
]


def _brevity_splits() -> dict[str, list[Question]]:
    qs = [Question(q, None, str(i)) for i, q in enumerate(BREVITY_QUESTIONS)]
    return {"train": qs[:16], "test": qs[16:]}  # too few questions for a dev split


ADDITION = DemoTask(name="addition", title="correct answers (0/1)", splits=addition_questions(), max_tokens=16)
BREVITY = DemoTask(name="brevity", title="brevity reward", splits=_brevity_splits(), max_tokens=40,
                   system="Answer the question.")


def demo_task(name: str) -> DemoTask:
    tasks: dict[str, Any] = {"addition": ADDITION, "brevity": BREVITY}
    if name not in tasks:
        raise ValueError(f"unknown demo task {name!r}; choose one of {sorted(tasks)}")
    return tasks[name]
