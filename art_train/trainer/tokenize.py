"""Trajectories -> token ids, an assistant mask and the sampler's logprobs.

Each history is rendered with the model's chat template, one message at a time. An assistant
turn that carries a sample gets its exact sampled token ids spliced in (no re-tokenization drift);
an assistant turn without one (a teacher's, a hand-built chat model's) is context: the policy never
sampled it, so it is not trained on-policy, unless the caller asks (SFT does; GRPO with
``TrainConfig.train_unsampled_turns``), when it is re-tokenized and counted. When the template rewrites earlier
turns (turn k's rendering is not a prefix of turn k+1's), the sequence is split at the break.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from art_core import History, Trajectory, message_sample

from ..models import template_messages

__all__ = [
    "Sequence",
    "TokenizeStats",
    "check_prefix_preserving",
    "fit_length",
    "tokenize_history",
    "tokenize_trajectory",
]

logger = logging.getLogger(__name__)

NAN = float("nan")


@dataclass
class Sequence:
    """One training sequence: token ids, which of them are trained, and their sampler logprobs."""

    token_ids: list[int]
    mask: list[bool]  # True where the token is trained
    sampler_logprobs: list[float]  # NaN where unknown (context, re-tokenized turns)
    advantage: float = 0.0
    trajectory: int = 0  # index of the trajectory it came from, within the step

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)


@dataclass
class TokenizeStats:
    """Counts that end up in a step's metrics (``tokenize/<name>``)."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def metrics(self) -> dict[str, int]:
        return {f"tokenize/{k}": v for k, v in sorted(self.counts.items())}


class _Renderer:
    def __init__(self, tokenizer: Any, template: str, tools: list[dict[str, Any]] | None) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.tools = tools or None

    def text(self, messages: list[dict[str, Any]], generation_prompt: bool = False) -> str:
        if not messages:
            return ""
        return self.tokenizer.apply_chat_template(
            template_messages(messages),
            tools=self.tools,
            chat_template=self.template,
            tokenize=False,
            add_generation_prompt=generation_prompt,
        )

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def _trained_end(rendered: str, eos: str | None) -> int:
    """Where the trained part of a re-tokenized assistant rendering ends (just after its eos)."""
    if eos and eos in rendered:
        return rendered.rindex(eos) + len(eos)
    return len(rendered)


def tokenize_history(
    history: History,
    tokenizer: Any,
    template: str,
    *,
    train_unsampled: bool,
    stats: TokenizeStats,
) -> list[Sequence]:
    """Token sequences for one history (more than one where the template breaks the prefix).

    `train_unsampled`: also train assistant turns that carry no sample (re-tokenized, counted
    as ``retokenized_turns``); otherwise they are context.
    """
    r = _Renderer(tokenizer, template, history.tools)
    eos = tokenizer.eos_token
    eos_id = tokenizer.eos_token_id
    messages = history.messages()
    sequences: list[Sequence] = []
    ids: list[int] = []
    mask: list[bool] = []
    lps: list[float] = []
    consumed = ""  # the rendered text that `ids` stands for

    def flush() -> None:
        nonlocal ids, mask, lps
        last = max((i for i, m in enumerate(mask) if m), default=-1)
        if last >= 0:  # trailing context after the last trained token teaches nothing
            sequences.append(Sequence(ids[: last + 1], mask[: last + 1], lps[: last + 1]))
        ids, mask, lps = [], [], []

    def add(new_ids: list[int], trained: bool, logprobs: list[float] | None = None) -> None:
        ids.extend(new_ids)
        mask.extend([trained] * len(new_ids))
        lps.extend(logprobs if logprobs is not None else [NAN] * len(new_ids))

    for i, raw in enumerate(history.turns):
        if raw.get("role") != "assistant" or i == 0 or raw.get("weight") == 0:
            continue  # a turn with weight 0 (SFT's mask="last") is context, as in OpenAI's fine-tuning format
        sample = message_sample(raw)
        if sample is None and not train_unsampled:
            stats.add("unsampled_context_turns")
            continue
        prompt = r.text(messages[:i], generation_prompt=True)
        if not prompt.startswith(consumed):
            stats.add("prefix_breaks")
            logger.info("chat template is not prefix-preserving at message %d: splitting the sequence", i)
            flush()
            consumed = ""
        add(r.ids(prompt[len(consumed) :]), False)
        full = r.text(messages[: i + 1])
        turn = full[len(prompt) :] if full.startswith(prompt) else ""
        if sample is not None:
            stats.add("spliced_turns")
            add(sample.token_ids, True, sample.logprobs)
            sampled = tokenizer.decode(sample.token_ids)
            if turn.startswith(sampled):
                add(r.ids(turn[len(sampled) :]), False)
            else:  # the template renders this turn differently from what was sampled: close it ourselves
                stats.add("sample_text_mismatch")
                if not sample.token_ids or sample.token_ids[-1] != eos_id:
                    add([eos_id], False)
                tail = turn[_trained_end(turn, eos) :]
                add(r.ids(tail), False)
        else:
            stats.add("retokenized_turns")
            end = _trained_end(turn, eos)
            add(r.ids(turn[:end]), True)
            add(r.ids(turn[end:]), False)
        consumed = full
    flush()
    return sequences


def tokenize_trajectory(
    trajectory: Trajectory,
    tokenizer: Any,
    template: str,
    *,
    stats: TokenizeStats,
    train_unsampled: bool = False,
) -> list[Sequence]:
    """Sequences for the main history and each additional history (each its own sequence).

    Assistant turns without a sample are context unless `train_unsampled`; a trajectory that ends
    up with no trained token is counted (``trajectories_without_trained_tokens``).
    """
    out: list[Sequence] = []
    for history in trajectory.histories():
        out.extend(tokenize_history(history, tokenizer, template, train_unsampled=train_unsampled, stats=stats))
    if not out:
        stats.add("trajectories_without_trained_tokens")
    return out


def fit_length(seq: Sequence, max_len: int, overlong: str, stats: TokenizeStats) -> Sequence | None:
    """Truncate or drop a sequence longer than `max_len` (counted); None when nothing trainable is left."""
    if len(seq) <= max_len:
        return seq
    if overlong == "drop":
        stats.add("overlong_dropped")
        return None
    stats.add("overlong_truncated")
    cut = Sequence(
        seq.token_ids[:max_len],
        seq.mask[:max_len],
        seq.sampler_logprobs[:max_len],
        seq.advantage,
        seq.trajectory,
    )
    if not any(cut.mask):
        stats.add("overlong_dropped")
        return None
    return cut


def check_prefix_preserving(tokenizer: Any, template: str) -> bool:
    """Whether the template renders turn k as a prefix of turn k+1 on a probe conversation with a tool call."""
    tools = [{"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "<think>r</think>a1", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "t"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a3"},
    ]
    r = _Renderer(tokenizer, template, tools)
    try:
        texts = [r.text(conversation[: k + 1]) for k in range(1, len(conversation))]
    except Exception:  # noqa: BLE001 - a template that cannot render the probe is not known to preserve it
        return False
    return all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))


def is_known(logprob: float) -> bool:
    return not math.isnan(logprob)
