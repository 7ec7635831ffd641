"""One judge call through litellm: structured output where supported, JSON extraction where not.

A wrong answer (bad JSON, wrong ids, scores outside [0, 1]) gets one corrective retry; transient
errors (timeouts, 429, 5xx, dropped connections) get retries with backoff. Anything else raises
`JudgeError`: a judge failure is never turned into a score.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError, field_validator

from art_core import retry

logger = logging.getLogger(__name__)


class TrajectoryScore(BaseModel):
    trajectory_id: str
    explanation: str
    score: float

    @field_validator("trajectory_id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class JudgeAnswer(BaseModel):
    """The schema the judge answers in (sent as `response_format` where the provider supports it)."""

    scores: list[TrajectoryScore]


class JudgeError(RuntimeError):
    """The judge could not score a group: it was unreachable, or answered wrongly twice."""


class BadAnswer(ValueError):
    """The judge's reply could not be used; the message says what was wrong (and is sent back to it)."""


@dataclass
class Usage:
    """Judge usage summed over calls (retries included)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # None when litellm does not know the judge's price

    def add(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        self.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        self.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        cost = response_cost(response)
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost


def import_litellm() -> Any:
    """litellm, imported with its bundled cost map: without the flag, its import fetches one over the network."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


def response_cost(response: Any) -> float | None:
    """The call's cost in USD where litellm knows the judge's price, else None."""
    hidden = getattr(response, "_hidden_params", None) or {}
    if "response_cost" in hidden:  # litellm already priced it (None: it has no price)
        cost = hidden["response_cost"]
    else:
        litellm = import_litellm()

        try:
            cost = litellm.completion_cost(completion_response=response)
        except Exception as exc:  # litellm raises for models it has no price for
            logger.debug("no cost for judge response: %r", exc)
            return None
    return float(cost) if isinstance(cost, (int, float)) and math.isfinite(cost) else None


def extract_json(text: str) -> Any:
    """The first JSON value in `text` that holds scores: bare, in a fenced block or inside prose."""
    text = text.strip()
    candidates = [text] + [m.group(1) for m in re.finditer(r"```(?:json)?\s*(.*?)```", text, re.S)]
    # strict=False: raw control characters inside strings, which constrained decoders write (xgrammar's
    # maxLength strings admit a tab), are taken rather than failing an otherwise whole answer
    decoder = json.JSONDecoder(strict=False)
    for candidate in candidates:
        for start in (i for i, ch in enumerate(candidate) if ch in "{["):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except ValueError:
                continue
            if isinstance(value, dict) and "scores" in value:
                return value
            if (
                isinstance(value, list)
                and value
                and all(isinstance(v, dict) and "trajectory_id" in v for v in value)
            ):
                return {"scores": value}
    raise BadAnswer("the reply has no JSON object with a 'scores' list")


def parse_answer(text: str | None, ids: list[str]) -> dict[str, TrajectoryScore]:
    """Validate the judge's reply: one score per id, no others, each a finite number in [0, 1]."""
    if not text or not text.strip():
        raise BadAnswer("the reply was empty")
    try:
        answer = JudgeAnswer.model_validate(extract_json(text))
    except ValidationError as exc:
        raise BadAnswer(
            f"the JSON does not match the schema: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}"
        ) from exc
    got: dict[str, TrajectoryScore] = {}
    for s in answer.scores:
        tid = s.trajectory_id.strip()
        if tid in got:
            raise BadAnswer(f"trajectory {tid} was scored twice")
        got[tid] = s
    missing = [i for i in ids if i not in got]
    extra = [i for i in got if i not in ids]
    if missing or extra:
        raise BadAnswer(
            f"expected exactly one score for each of the ids {ids}, got {len(got)} scores"
            + (f"; missing {missing}" if missing else "")
            + (f"; unknown {extra}" if extra else "")
        )
    bad = {i: s.score for i, s in got.items() if not (math.isfinite(s.score) and 0.0 <= s.score <= 1.0)}
    if bad:
        raise BadAnswer(f"scores must be numbers from 0 to 1; out of range: {bad}")
    return got


def transient_errors() -> tuple[type[BaseException], ...]:
    litellm = import_litellm()

    return (
        litellm.Timeout,
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.APIConnectionError,
    )


MAX_EXPLANATION = 300  # characters per explanation in the exact schema
_ENTRY_BYTES = 72  # an entry's JSON around its explanation (id up to 4 digits, longest score, ", ")


def explanation_limit(max_tokens: int | None, n: int) -> int:
    """The explanation length (characters) that lets `n` entries fit in `max_tokens` even at one token
    per byte, the worst a byte-level tokenizer does on ASCII; `MAX_EXPLANATION` when uncapped. Without
    it a judge cut off at max_tokens mid-explanation returns no JSON at all."""
    if not max_tokens or n < 1:
        return MAX_EXPLANATION
    return max(0, min(MAX_EXPLANATION, (max_tokens - 16) // n - _ENTRY_BYTES))


def group_schema(ids: list[str], max_explanation: int = MAX_EXPLANATION) -> dict[str, Any]:
    """The answer's JSON schema for one group: one entry per id, in order, each score from 0 to 1.

    A server that decodes under it (constrained decoding) can only return a usable answer, so even a
    small judge is measured on its ranking rather than its JSON (given max_tokens room for it: see
    `explanation_limit`).
    """

    def entry(i: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "trajectory_id": {"const": i},
                "explanation": {"type": "string", "maxLength": max_explanation},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["trajectory_id", "explanation", "score"],
            "additionalProperties": False,
        }

    scores = {"type": "array", "prefixItems": [entry(i) for i in ids], "items": False,
              "minItems": len(ids), "maxItems": len(ids)}  # fmt: skip
    return {"type": "object", "properties": {"scores": scores}, "required": ["scores"], "additionalProperties": False}


@dataclass
class Judge:
    """A litellm model that scores groups.

    Example:
        judge = Judge("openai/gpt-4.1-mini")
        scores = await judge.score(prompt.messages, prompt.ids, Usage())
    """

    model: str
    litellm_params: dict[str, Any] = field(default_factory=dict)
    structured: bool | None = None  # None: use response_format where litellm says the model supports it
    # with structured output, a schema made for each group (`group_schema`) instead of `JudgeAnswer`: for
    # servers that honour the whole JSON schema (ART's engines; OpenAI's strict mode refuses some keywords)
    exact_schema: bool = False
    timeout: float = 120.0
    max_attempts: int = 4  # per call, for transient errors
    retry_delay: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(
                f"judge {self.model!r} is not a litellm model name: use 'provider/model', "
                "e.g. 'openai/gpt-4.1-mini' (with litellm_params={'api_base': ...} for a local server)"
            )
        if "model" in self.litellm_params or "messages" in self.litellm_params:
            raise ValueError(
                "litellm_params must not contain 'model' or 'messages': pass the judge name as `judge`"
            )

    def use_structured(self) -> bool:
        if self.structured is not None:
            return self.structured
        litellm = import_litellm()

        try:
            return bool(litellm.supports_response_schema(model=self.model))
        except Exception:
            return False

    @property
    def cache_identity(self) -> str:
        """What distinguishes this judge in cache keys (model and endpoint, never the API key)."""
        return json.dumps(
            [self.model, self.litellm_params.get("api_base") or self.litellm_params.get("base_url")]
        )

    async def complete(
        self, messages: list[dict[str, Any]], usage: Usage, ids: list[str] | None = None
    ) -> str | None:
        """One completion with backoff on transient errors; returns the reply's text. `ids`: the
        trajectory ids the answer must score (the exact schema's, where it is used)."""
        litellm = import_litellm()

        kwargs: dict[str, Any] = {
            "timeout": self.timeout,
            "num_retries": 0,
            "max_retries": 0,
            **self.litellm_params,
        }
        if self.use_structured():
            if self.exact_schema and ids:
                schema = group_schema(ids, explanation_limit(kwargs.get("max_tokens"), len(ids)))
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "judge_answer", "schema": schema},
                }
            else:
                kwargs["response_format"] = JudgeAnswer

        @retry(max_attempts=self.max_attempts, delay=self.retry_delay, exceptions=transient_errors())
        async def call() -> Any:
            usage.calls += 1
            return await litellm.acompletion(model=self.model, messages=messages, **kwargs)

        response = await call()
        usage.add(response)
        return response.choices[0].message.content

    async def score(
        self, messages: list[dict[str, Any]], ids: list[str], usage: Usage
    ) -> dict[str, TrajectoryScore]:
        """Scores for `ids`; one corrective retry on a wrong answer; calls and tokens go to `usage`."""
        text = await self.complete(messages, usage, ids)
        try:
            return parse_answer(text, ids)
        except BadAnswer as first:
            logger.warning("judge %s gave a wrong answer (%s); asking once more", self.model, first)
            fix = [
                *messages,
                {"role": "assistant", "content": text or ""},
                {
                    "role": "user",
                    "content": f"That answer cannot be used: {first}. Reply again with JSON only: "
                    f'{{"scores": [...]}} with exactly one entry for each trajectory id {ids}, '
                    "each score a number from 0 to 1.",
                },
            ]
            text = await self.complete(fix, usage, ids)
            try:
                return parse_answer(text, ids)
            except BadAnswer as second:
                raise BadAnswer(f"wrong answer twice: first {first}; then {second}") from second


__all__ = [
    "BadAnswer",
    "Judge",
    "JudgeAnswer",
    "JudgeError",
    "TrajectoryScore",
    "Usage",
    "explanation_limit",
    "extract_json",
    "group_schema",
    "parse_answer",
]
