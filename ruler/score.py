"""`score` and `score_group`: one judge call rates a whole group of trajectories against each other."""

from __future__ import annotations

import logging
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from art_core import Model, Trajectory, TrajectoryGroup

from .cache import CacheLocation, JudgeCache, cache_key
from .judge import Judge, JudgeError, TrajectoryScore, Usage
from .prompt import DEFAULT_RUBRIC, Item, Message, Tool, build_prompt

logger = logging.getLogger(__name__)

DEFAULT_JUDGE = "openai/gpt-4.1-mini"


@dataclass(frozen=True)
class Score:
    """One trajectory's score (0 to 1, relative to its group) and the judge's reason."""

    score: float
    explanation: str


@dataclass
class RulerStats:
    """Counts over every `score_group` call given this object as ``stats=``.

    Example:
        stats = ruler.RulerStats()
        await ruler.score_group(group, judge=..., stats=stats)
    """

    groups_scored: int = 0
    groups_dropped: int = 0
    groups_skipped: int = 0  # groups of one trajectory, left as they were
    judge_calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    drop_reasons: Counter[str] = field(default_factory=Counter)


@dataclass
class Outcome:
    scores: list[Score]  # one per input item
    usage: Usage
    cache_hits: int = 0
    rank_agreement: float | None = None


def make_judge(
    judge: str | Model | Judge | None,
    litellm_params: dict[str, Any] | None,
    *,
    structured: bool | None,
    timeout: float,
    max_attempts: int,
    retry_delay: float,
) -> Judge:
    if isinstance(judge, Judge):
        return judge
    params = dict(litellm_params or {})
    if isinstance(judge, Model):
        served = judge.litellm_params()
        name = served.pop("model")
        params = {**served, **params}
        # ART's engines honour response_format, the whole JSON schema included; litellm cannot know that
        exact = structured is not False and _registered(judge)
        structured = True if exact else structured
    else:
        exact = False
        name = judge if judge is not None else os.environ.get("RULER_JUDGE", DEFAULT_JUDGE)
    return Judge(
        name,
        params,
        structured=structured,
        exact_schema=exact,
        timeout=timeout,
        max_attempts=max_attempts,
        retry_delay=retry_delay,
    )


def _registered(model: Model) -> bool:
    """Whether `model` is served by an ART backend (registered), rather than only pointed at an endpoint."""
    try:
        model.backend()
    except RuntimeError:
        return False
    return True


def kendall_tau(a: list[float], b: list[float]) -> float | None:
    """Kendall's tau-b between two score lists; None when either is constant (no ranking)."""
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b))
    return (concordant - discordant) / denom if denom else None


def cached_scores(entry: dict[str, Any] | None, ids: list[str]) -> dict[str, TrajectoryScore] | None:
    """A cache entry's scores, or None when it is missing or does not fit this prompt."""
    try:
        by_id = {i: TrajectoryScore.model_validate(s) for i, s in entry["scores"].items()} if entry else None
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    return by_id if by_id is not None and sorted(by_id) == sorted(ids) else None


async def _one_pass(
    judge: Judge,
    items: list[Item],
    rubric: str,
    max_tool_output_chars: int,
    order: list[int] | None,
    cache: JudgeCache | None,
    usage: Usage,
) -> tuple[list[TrajectoryScore], bool, list[str]]:
    """Scores per item, whether the cache answered, and each item's id in this prompt."""
    prompt = build_prompt(items, rubric, max_tool_output_chars=max_tool_output_chars, order=order)
    key = cache_key(judge.cache_identity, prompt.messages, judge.use_structured()) if cache else ""
    hit = cached_scores(cache.get(key), prompt.ids) if cache else None
    if hit is not None:
        by_id = hit
    else:
        by_id = await judge.score(prompt.messages, prompt.ids, usage)
        if cache:
            cache.put(key, {"judge": judge.model, "scores": {i: s.model_dump() for i, s in by_id.items()}})
    return [by_id[i] for i in prompt.item_ids], hit is not None, prompt.item_ids


async def judge_items(
    items: list[Item],
    judge: Judge,
    *,
    rubric: str = DEFAULT_RUBRIC,
    cache: CacheLocation | None = None,
    noise_check: bool = False,
    max_tool_output_chars: int = 2000,
    usage: Usage | None = None,
    seed: int | None = None,
) -> Outcome:
    """Score `items` in one judge call (two with `noise_check`); usage accumulates into `usage`."""
    usage = usage if usage is not None else Usage()
    store = JudgeCache(cache) if cache is not None else None
    first, hit1, ids = await _one_pass(judge, items, rubric, max_tool_output_chars, None, store, usage)
    outcome = Outcome([Score(s.score, s.explanation) for s in first], usage, cache_hits=int(hit1))
    k = len(set(ids))
    if not noise_check or k < 2:
        return outcome

    order = list(range(k))
    rng = random.Random(seed if seed is not None else k)
    while order == sorted(order):
        rng.shuffle(order)
    second, hit2, _ = await _one_pass(judge, items, rubric, max_tool_output_chars, order, store, usage)
    outcome.cache_hits += int(hit2)
    # agreement over distinct trajectories only: duplicates would count the same pair twice
    seen: dict[str, tuple[float, float]] = {}
    for i, a, b in zip(ids, first, second, strict=True):
        seen.setdefault(i, (a.score, b.score))
    pairs = list(seen.values())
    outcome.rank_agreement = kendall_tau([p[0] for p in pairs], [p[1] for p in pairs])
    outcome.scores = [
        Score(
            (a.score + b.score) / 2,
            f"pass 1 ({a.score:.2f}): {a.explanation} | pass 2 ({b.score:.2f}): {b.explanation}",
        )
        for a, b in zip(first, second, strict=True)
    ]
    return outcome


def _items_from_lists(
    message_lists: list[list[Message]], tools: list[Tool] | list[list[Tool] | None] | None
) -> list[Item]:
    if isinstance(message_lists, TrajectoryGroup) or any(isinstance(m, Trajectory) for m in message_lists):
        raise TypeError("score() takes message lists; use score_group() for a TrajectoryGroup")
    per: list[list[Tool] | None]
    if tools and isinstance(tools[0], list):
        if len(tools) != len(message_lists):
            raise ValueError(
                f"got {len(tools)} tool lists for {len(message_lists)} message lists; pass one each, or one shared list"
            )
        per = tools
    else:
        per = [cast("list[Tool] | None", tools)] * len(message_lists)
    return [Item(list(ms), t or None) for ms, t in zip(message_lists, per, strict=True)]


async def _judge(
    items: list[Item],
    what: str,
    judge: str | Model | Judge | None,
    usage: Usage,
    *,
    rubric: str,
    litellm_params: dict[str, Any] | None,
    structured: bool | None,
    cache: CacheLocation | None,
    noise_check: bool,
    max_tool_output_chars: int,
    timeout: float,
    max_attempts: int,
    retry_delay: float,
    call: bool = True,
) -> tuple[Judge, Outcome | None]:
    """The one path from items to scores for `score` and `score_group`: build the judge (a bad
    setting raises here), ask it unless `call` is False, and turn any failure into a `JudgeError`
    that names `what` was being scored."""
    j = make_judge(
        judge,
        litellm_params,
        structured=structured,
        timeout=timeout,
        max_attempts=max_attempts,
        retry_delay=retry_delay,
    )
    if not call:
        return j, None
    try:
        outcome = await judge_items(
            items,
            j,
            rubric=rubric,
            cache=cache,
            noise_check=noise_check,
            max_tool_output_chars=max_tool_output_chars,
            usage=usage,
        )
    except Exception as exc:
        raise JudgeError(f"RULER judge {j.model!r} failed on {what}: {exc}") from exc
    return j, outcome


async def score(
    message_lists: list[list[Message]],
    judge: str | Model | Judge | None = None,
    *,
    tools: list[Tool] | list[list[Tool] | None] | None = None,
    rubric: str = DEFAULT_RUBRIC,
    litellm_params: dict[str, Any] | None = None,
    structured: bool | None = None,
    cache: CacheLocation | None = None,
    noise_check: bool = False,
    max_tool_output_chars: int = 2000,
    timeout: float = 120.0,
    max_attempts: int = 4,
    retry_delay: float = 1.0,
) -> list[Score]:
    """Score conversations relative to each other; raises `JudgeError` when the judge fails.

    Example:
        scores = await ruler.score([conv_a, conv_b], judge="openai/gpt-4.1-mini", tools=tools)
        best = max(range(2), key=lambda i: scores[i].score)
    """
    items = _items_from_lists(message_lists, tools)
    _, outcome = await _judge(
        items,
        f"{len(items)} conversations",
        judge,
        Usage(),
        rubric=rubric,
        litellm_params=litellm_params,
        structured=structured,
        cache=cache,
        noise_check=noise_check,
        max_tool_output_chars=max_tool_output_chars,
        timeout=timeout,
        max_attempts=max_attempts,
        retry_delay=retry_delay,
    )
    assert outcome is not None
    return outcome.scores


def group_label(group: TrajectoryGroup) -> str:
    trajs = group.trajectories
    meta = f" {group.metadata!r}"[:120] if group.metadata else ""
    return f"group{meta} of {len(trajs)} trajectories (first id {trajs[0].id})"


def _warn_thin(group: TrajectoryGroup) -> None:
    """Say so when trajectories have nothing (or no answer) to judge: they are scored anyway."""
    empty = [t.id for t in group.trajectories if not t.turns and not t.additional_histories]
    silent = [
        t.id
        for t in group.trajectories
        if (t.turns or t.additional_histories)
        and not any(m.get("role") == "assistant" for h in [t, *t.additional_histories] for m in h.turns)
    ]
    if empty:
        group.metrics["ruler_empty_trajectories"] = len(empty)
        logger.warning(
            "RULER: %d trajectories have no messages (%s); they are scored as they are. Did the rollout "
            "record its turns (messages=, or a capture block)?",
            len(empty),
            ", ".join(empty[:5]),
        )
    if silent:
        group.metrics["ruler_no_assistant_turn"] = len(silent)
        logger.warning(
            "RULER: %d trajectories have no assistant turn (%s); the judge sees only the prompt",
            len(silent),
            ", ".join(silent[:5]),
        )


async def score_group(
    group: TrajectoryGroup,
    judge: str | Model | Judge | None = None,
    *,
    rubric: str = DEFAULT_RUBRIC,
    litellm_params: dict[str, Any] | None = None,
    swallow_exceptions: bool = False,
    structured: bool | None = None,
    cache: CacheLocation | None = None,
    noise_check: bool = False,
    max_tool_output_chars: int = 2000,
    timeout: float = 120.0,
    max_attempts: int = 4,
    retry_delay: float = 1.0,
    stats: RulerStats | None = None,
) -> TrajectoryGroup | None:
    """Replace each trajectory's reward with a judge's score relative to the rest of its group.

    The old reward moves to ``metrics["independent_reward"]``, the score goes to ``reward`` and
    ``metrics["ruler_score"]``, the judge's explanation to the trajectory's logs, and the judge's
    calls, tokens and cost (where litellm knows it) to the group's metrics (and to `stats`, a
    `RulerStats` you keep across calls, if given). A judge failure raises `JudgeError`, or with
    ``swallow_exceptions=True`` drops the group (returns None) and counts it. A group of one
    trajectory is left as it is (a relative score of one means nothing), with a warning and
    ``metrics["ruler_skipped"]``. The judge defaults to ``$RULER_JUDGE``, else ``openai/gpt-4.1-mini``.

    Example:
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, t) for _ in range(8)) for t in tasks),
            after_each=lambda g: ruler.score_group(g, judge="openai/gpt-4.1-mini", swallow_exceptions=True))
    """
    tally = stats if stats is not None else RulerStats()  # a throwaway one: no module-level state
    if not isinstance(group, TrajectoryGroup):
        raise TypeError(
            f"score_group() takes a TrajectoryGroup, got {type(group).__name__}; use score() for message lists"
        )
    if not group.trajectories:
        logger.info(
            "RULER: group has no trajectories (%d rollouts failed); nothing to score", len(group.exceptions)
        )
        return group
    single = len(group.trajectories) == 1
    if not single:
        _warn_thin(group)
    items = [
        Item(t.messages(), t.tools or None, tuple(h.messages() for h in t.additional_histories))
        for t in group.trajectories
    ]
    usage = Usage()
    try:
        j, outcome = await _judge(
            items,
            group_label(group),
            judge,
            usage,
            rubric=rubric,
            litellm_params=litellm_params,
            structured=structured,
            cache=cache,
            noise_check=noise_check,
            max_tool_output_chars=max_tool_output_chars,
            timeout=timeout,
            max_attempts=max_attempts,
            retry_delay=retry_delay,
            call=not single,
        )
    except JudgeError as error:
        if not swallow_exceptions:
            raise
        tally.groups_dropped += 1
        tally.drop_reasons[type(error.__cause__ or error).__name__] += 1
        logger.warning("%s; dropping the group (swallow_exceptions=True)", error)
        return None
    finally:
        tally.judge_calls += usage.calls
        tally.prompt_tokens += usage.prompt_tokens
        tally.completion_tokens += usage.completion_tokens
        tally.cost_usd += usage.cost_usd or 0.0
    if outcome is None:  # a group of one
        tally.groups_skipped += 1
        group.metrics["ruler_skipped"] = 1
        logger.warning(
            "RULER: %s: one trajectory cannot be scored relative to others; its reward (%s) is kept. "
            "Give each group several rollouts of the task",
            group_label(group),
            group.trajectories[0].reward,
        )
        return group

    tally.groups_scored += 1
    tally.cache_hits += outcome.cache_hits
    for t, s in zip(group.trajectories, outcome.scores, strict=True):
        if "ruler_score" not in t.metrics:  # scoring twice keeps the first, user-given reward
            t.metrics["independent_reward"] = t.reward
        t.reward = s.score
        t.metrics["ruler_score"] = s.score
        t.log(f"RULER {j.model}: {s.score:.3f}: {s.explanation}")
    group.metrics["ruler_judge_calls"] = usage.calls
    group.metrics["ruler_judge_prompt_tokens"] = usage.prompt_tokens
    group.metrics["ruler_judge_completion_tokens"] = usage.completion_tokens
    group.metrics["ruler_cache_hits"] = outcome.cache_hits
    if usage.cost_usd is not None:
        group.metrics["ruler_judge_cost_usd"] = usage.cost_usd
    if outcome.rank_agreement is not None:
        group.metrics["ruler_rank_agreement"] = outcome.rank_agreement
    elif noise_check:
        logger.info(
            "RULER noise check: no rank agreement for %s (too few distinct trajectories or tied scores)",
            group_label(group),
        )
    return group


async def ruler_score_group(
    group: TrajectoryGroup,
    judge_model: str | Model | Judge | None = None,
    extra_litellm_params: dict[str, Any] | None = None,
    *,
    rubric: str = DEFAULT_RUBRIC,
    swallow_exceptions: bool = False,
    debug: bool = False,
) -> TrajectoryGroup | None:
    """OpenPipe ART's name and arguments for `score_group` (``judge_model`` is ``judge``,
    ``extra_litellm_params`` is ``litellm_params``; ``debug`` logs each score and its reason).
    New code should call `score_group`. The judge default is ours (``$RULER_JUDGE``, else
    ``openai/gpt-4.1-mini``), not ART's ``openai/o3``."""
    out = await score_group(
        group,
        judge_model,
        rubric=rubric,
        litellm_params=extra_litellm_params,
        swallow_exceptions=swallow_exceptions,
    )
    if debug and out is not None:
        for t in out.trajectories:
            logger.info("RULER %s: %s", t.id, t.logs[-1] if t.logs else t.reward)
    return out


__all__ = [
    "DEFAULT_JUDGE",
    "RulerStats",
    "Score",
    "judge_items",
    "kendall_tau",
    "ruler_score_group",
    "score",
    "score_group",
]
