"""RULER: rewards without a reward function. An LLM judge scores a whole group of trajectories,
relative to each other, in one call through litellm.

Example:
    import ruler
    groups = await art.gather_trajectory_groups(
        (art.TrajectoryGroup(rollout(model, t) for _ in range(8)) for t in tasks),
        after_each=lambda g: ruler.score_group(g, judge="openai/gpt-4.1-mini"))

litellm is imported on the first judge call, not by ``import ruler``.
"""

from .cache import JudgeCache
from .judge import BadAnswer, Judge, JudgeAnswer, JudgeError, TrajectoryScore, Usage
from .prompt import CUT_MARKER, DEFAULT_RUBRIC, Item, JudgePrompt, build_naive_prompt, build_prompt
from .score import DEFAULT_JUDGE, RulerStats, Score, kendall_tau, ruler_score_group, score, score_group

__all__ = [
    "CUT_MARKER",
    "DEFAULT_JUDGE",
    "DEFAULT_RUBRIC",
    "BadAnswer",
    "Item",
    "Judge",
    "JudgeAnswer",
    "JudgeCache",
    "JudgeError",
    "JudgePrompt",
    "RulerStats",
    "Score",
    "TrajectoryScore",
    "Usage",
    "build_naive_prompt",
    "build_prompt",
    "kendall_tau",
    "ruler_score_group",
    "score",
    "score_group",
]
