"""OpenPipe ART's ``art.mcp.generate_scenarios``, on our LLM task generator (`generate_tasks`).

ART asks an LLM at an OpenAI-compatible endpoint (OpenRouter by default) for scenarios with a
``task`` and a ``difficulty``; so does `generate_tasks`, which also validates and de-duplicates
them. The schema sampler (`generate_verified_tasks`) needs no LLM and is not what ART does.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import mcp.types as mcp_types

from .autorl import Task, TaskGenerationError, generate_tasks
from .session import McpSession, to_openai_tool

logger = logging.getLogger(__name__)


@dataclass
class GeneratedScenario:
    """ART's scenario: the user's request and its difficulty (1 to 5)."""

    task: str
    difficulty: int

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "difficulty": self.difficulty}


class GeneratedScenarioCollection:
    """ART's scenario list. `tasks` holds the same scenarios as our `Task`s (for `art_mcp.rollout`)."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)
        self.scenarios = [GeneratedScenario(t.task, t.difficulty) for t in self.tasks]

    def __len__(self) -> int:
        return len(self.scenarios)

    def __iter__(self) -> Iterator[GeneratedScenario]:
        return iter(self.scenarios)

    def __getitem__(self, index: int) -> GeneratedScenario:
        return self.scenarios[index]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.scenarios]

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps({"scenarios": self.to_dicts()}, indent=indent)

    def shuffle(self) -> GeneratedScenarioCollection:
        tasks = list(self.tasks)
        random.shuffle(tasks)
        return GeneratedScenarioCollection(tasks)

    def split(self, train_size: int) -> tuple[GeneratedScenarioCollection, GeneratedScenarioCollection]:
        """The first `train_size` scenarios and the rest, in order (ART's `split`)."""
        if train_size > len(self.tasks):
            raise ValueError(f"train_size ({train_size}) is larger than the {len(self.tasks)} scenarios")
        return GeneratedScenarioCollection(self.tasks[:train_size]), GeneratedScenarioCollection(self.tasks[train_size:])

    def filter_by_difficulty(self, min_difficulty: int = 1, max_difficulty: int = 5) -> GeneratedScenarioCollection:
        return GeneratedScenarioCollection([t for t in self.tasks if min_difficulty <= t.difficulty <= max_difficulty])

    def get_difficulty_distribution(self) -> Counter[int]:
        return Counter(s.difficulty for s in self.scenarios)


def _field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _spec(tool: Any) -> dict[str, Any]:
    """An OpenAI tool spec from an MCP `Tool`, an OpenAI spec, or ART's ``{name, description, parameters}``
    (a dict or an object with those attributes, such as ART's `MCPTool`)."""
    if isinstance(tool, mcp_types.Tool) or (isinstance(tool, dict) and tool.get("type") == "function"):
        return to_openai_tool(tool)
    name = _field(tool, "name")
    if not name:
        raise ValueError(f"a tool needs a name: {tool!r}")
    function = {"name": name, "description": _field(tool, "description") or "",
                "parameters": _field(tool, "parameters") or {"type": "object", "properties": {}}}
    return {"type": "function", "function": function}


def _resource_text(resources: Sequence[Any]) -> str:
    listed = []
    for r in resources:
        listed.append({k: _field(r, k) for k in ("uri", "name", "description") if _field(r, k)})
    return "The server also offers these resources:\n" + json.dumps(listed, indent=1)


async def generate_scenarios(
    tools: McpSession | Sequence[Any],
    resources: Sequence[Any] = (),
    num_scenarios: int = 24,
    show_preview: bool = True,
    custom_instructions: str | None = None,
    generator_model: str = "openai/gpt-4.1-mini",
    generator_api_key: str | None = None,
    generator_base_url: str = "https://openrouter.ai/api/v1",
) -> GeneratedScenarioCollection:
    """OpenPipe ART's ``generate_scenarios``: `num_scenarios` scenarios for these tools from an LLM.

    ``generator_model`` is sent as it is to the OpenAI-compatible endpoint ``generator_base_url``
    (OpenRouter by default), with ``generator_api_key`` or ``$OPENROUTER_API_KEY``. Resources are
    listed in the prompt; ``custom_instructions`` are added to it. As in ART, fewer valid scenarios
    than asked for is an error (`TaskGenerationError`). ``show_preview`` logs the first five.

    Example:
        scenarios = await generate_scenarios(tools, num_scenarios=24, generator_model="openai/gpt-4.1-mini")
        train, val = scenarios.split(20)
    """
    api_key = generator_api_key or os.environ.get("OPENROUTER_API_KEY")
    if not api_key:
        raise ValueError("generator_api_key is required, or set OPENROUTER_API_KEY")
    specs: McpSession | list[dict[str, Any]] = tools if isinstance(tools, McpSession) else [_spec(t) for t in tools]
    if not specs:
        raise ValueError("generate_scenarios() needs at least one tool (our generator writes tasks that use tools)")
    instructions = "\n\n".join(p for p in (custom_instructions, _resource_text(resources) if resources else None) if p)
    tasks = await generate_tasks(
        specs,
        num_scenarios,
        generator=f"openai/{generator_model}",  # litellm's openai/ prefix: the name goes to the endpoint as is
        instructions=instructions or None,
        litellm_params={"api_base": generator_base_url, "api_key": api_key},
    )
    if len(tasks) < num_scenarios:
        raise TaskGenerationError(f"expected {num_scenarios} scenarios, got {len(tasks)} valid ones from {generator_model}")
    collection = GeneratedScenarioCollection(tasks)
    if show_preview:
        for i, s in enumerate(collection.scenarios[:5], 1):
            logger.info("scenario %d (difficulty %d/5): %s", i, s.difficulty, s.task[:120])
    return collection
