"""A generic tool-using agent over an MCP server: chat, call tools, repeat.

The loop ends when the model answers without calling a tool, or calls `complete_task` with its
final answer, or after `max_turns` model calls. Every chat completion is recorded by the model's
capturing client, every tool call by the session, so the returned trajectory is ready for a judge.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from art_core import Model, Trajectory, capture, record_tool_result

from .pool import ServerPool
from .session import McpSession

logger = logging.getLogger(__name__)

COMPLETE_TASK = "complete_task"
COMPLETE_TASK_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": COMPLETE_TASK,
        "description": "Call this once the task is done, with the final answer for the user.",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {"type": "string", "description": "The final answer or a summary of what was done."}
            },
            "required": ["answer"],
        },
    },
}
DEFAULT_SYSTEM_PROMPT = (
    "You are an assistant that completes the user's task by calling the available tools. "
    "Use tools to look things up or make changes instead of guessing. When the task is done, call "
    f"`{COMPLETE_TASK}` with your final answer."
)


class HasTask(Protocol):
    task: str


def request_params(model: Model, *, temperature: float | None = None, max_tokens: int | None = None,
                   extra_body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chat-completion keywords an agent turn sends: the sampling options given, and logprobs for a
    trainable model (the trainer needs the sampler's)."""
    params: dict[str, Any] = {}
    if temperature is not None:
        params["temperature"] = temperature
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    if model.trainable:
        params["logprobs"] = True
    if extra_body:
        params["extra_body"] = extra_body
    return params


def task_text(task: str | HasTask | dict[str, Any]) -> str:
    if isinstance(task, str):
        text = task
    elif isinstance(task, dict):
        text = task.get("task", "")
    else:
        text = getattr(task, "task", "")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            f"the task has no text: {task!r}; pass a string, a Task, or a dict with a 'task' key"
        )
    return text


async def rollout(
    model: Model,
    session: McpSession | ServerPool,
    task: str | HasTask | dict[str, Any],
    *,
    system_prompt: str | None = None,
    max_turns: int = 10,
    temperature: float | None = None,
    max_tokens: int | None = None,
    extra_body: dict[str, Any] | None = None,
    images: bool = False,
) -> Trajectory:
    """Run the agent on one task and return its trajectory (reward left at 0 for a judge to set).

    With `images` (a model that takes image input), images a tool returns follow its tool
    messages as a user message of OpenAI image parts; either way they are kept in
    ``metadata["mcp_calls"]``.

    `session` is a connected `McpSession`, or a `ServerPool` to take one from for this rollout.
    The final answer lands in ``trajectory.metadata["final_answer"]``; metrics record the turns,
    tool calls and errors, and whether the agent finished before `max_turns`.

    Example:
        async with art_mcp.connect("python -m art_mcp.servers.calculator") as session:
            traj = await art_mcp.rollout(model, session, "What is 17% of 2,340?")
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    if isinstance(session, ServerPool):
        async with session.session() as pooled:
            return await rollout(
                model,
                pooled,
                task,
                system_prompt=system_prompt,
                max_turns=max_turns,
                temperature=temperature,
                max_tokens=max_tokens,
                extra_body=extra_body,
                images=images,
            )
    text = task_text(task)
    own_complete = (
        COMPLETE_TASK in session.tool_names()
    )  # a server's own complete_task is called, not replaced
    tools = [*session.openai_tools(), *([] if own_complete else [COMPLETE_TASK_TOOL])]
    trajectory = Trajectory(  # type: ignore[call-arg]  # the pydantic plugin misses the messages alias
        messages=[
            {"role": "system", "content": system_prompt or DEFAULT_SYSTEM_PROMPT},
            {"role": "user", "content": text},
        ],
        tools=tools,
        metadata={"task": text, "mcp_server": session.label},
    )
    if not isinstance(task, str):
        trajectory.metadata["task_id"] = getattr(task, "id", None) or (
            task.get("id") if isinstance(task, dict) else None
        )
    params = request_params(model, temperature=temperature, max_tokens=max_tokens, extra_body=extra_body)

    final: str | None = None
    finished = False
    turns = 0
    async with model.openai_client() as client:
        with capture(trajectory):
            while turns < max_turns and not finished:
                turns += 1
                response = await client.chat.completions.create(
                    # plain dicts where openai's types name TypedDicts
                    model=model.served_name(), messages=trajectory.messages(), tools=tools, **params  # type: ignore[arg-type]
                )
                message = response.choices[0].message
                if not message.tool_calls:
                    final, finished = message.content or "", True
                    break
                shown = []
                for call in message.tool_calls:
                    if call.type != "function":  # only function tools are offered
                        raise RuntimeError(f"the model made a {call.type!r} tool call")
                    name, arguments = call.function.name, call.function.arguments
                    if name == COMPLETE_TASK:
                        final, finished = _answer(arguments), True
                        if own_complete:
                            await session.call(name, arguments, tool_call_id=call.id)
                        else:
                            record_tool_result(call.id, "Task marked complete.", name=COMPLETE_TASK)
                    else:
                        result = await session.call(name, arguments, tool_call_id=call.id)
                        shown.append(result.image_message() if images else None)
                trajectory.turns.extend(m for m in shown if m is not None)  # after all of the turn's tool messages
    trajectory.metadata["final_answer"] = final
    trajectory.metrics.update({"turns": turns, "finished": finished, "hit_max_turns": not finished})
    return trajectory.finish()


def _answer(arguments: str | None) -> str:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return arguments or ""
    if isinstance(parsed, dict) and isinstance(parsed.get("answer"), str):
        return parsed["answer"]
    return arguments or ""


__all__ = ["COMPLETE_TASK", "COMPLETE_TASK_TOOL", "DEFAULT_SYSTEM_PROMPT", "rollout", "task_text"]
