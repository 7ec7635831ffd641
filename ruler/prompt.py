"""What the judge sees: shared context once, each distinct trajectory's remainder once, a rubric.

Pure functions over plain OpenAI message dicts; no network, no litellm.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
Tool = dict[str, Any]

DEFAULT_RUBRIC = """\
- A trajectory that achieves its goal always scores higher than one that does not.
- Among trajectories that achieve the goal, a more efficient one (fewer steps, fewer wasted or
  repeated tool calls, no needless detours) scores higher.
- Give partial credit: a trajectory that gets further towards the goal scores higher than one
  that gets less far, even if neither finishes.
- Make the gaps between scores proportional to the differences in quality: two nearly equal
  trajectories get nearly equal scores; a much better one gets a much higher score.
- Scores are relative to this group, from 0 (worst possible) to 1 (best possible)."""

SYSTEM_PROMPT = """\
You are a careful judge of AI agent behaviour. You will see several trajectories of the same agent
working on the same task. Messages that all trajectories share come first, inside <context>; then
each trajectory's own messages, inside <trajectory id="...">. Score every trajectory from 0 to 1
relative to the others, following this rubric:

<rubric>
{rubric}
</rubric>

Answer with JSON only, in exactly this form, one entry per trajectory id, in any order:
{{"scores": [{{"trajectory_id": "1", "explanation": "one or two sentences", "score": 0.7}}]}}"""

CUT_MARKER = "\n[... {n} characters cut by RULER ...]\n"


@dataclass(frozen=True)
class Item:
    """One trajectory as the judge is shown it."""

    messages: list[Message]
    tools: list[Tool] | None = None
    additional: tuple[list[Message], ...] = ()  # other conversations of the rollout (sub-agents)


@dataclass(frozen=True)
class JudgePrompt:
    """The judge's messages plus how its ids map back to the input items."""

    messages: list[Message]
    ids: list[str]  # the ids the judge must answer for, in prompt order
    item_ids: list[str]  # for each input item, the id whose score it takes
    shared_prefix: int  # messages sent once as context


def cut_long(text: str, budget: int) -> str:
    """Keep the head and tail of `text`, with a visible marker saying how much was cut."""
    if budget <= 0 or len(text) <= budget:
        return text
    head = budget * 2 // 3
    tail = budget - head
    return text[:head] + CUT_MARKER.format(n=len(text) - budget) + (text[-tail:] if tail else "")


def cut_tool_outputs(messages: list[Message], budget: int) -> list[Message]:
    """Copies of `messages` whose tool outputs are at most `budget` characters (plus the marker)."""
    out = []
    for m in messages:
        if m.get("role") in ("tool", "function") and budget > 0:
            m = dict(m)
            content = m.get("content")
            if isinstance(content, str):
                m["content"] = cut_long(content, budget)
            elif isinstance(content, list):
                m["content"] = [
                    {**p, "text": cut_long(p["text"], budget)}
                    if isinstance(p, dict) and isinstance(p.get("text"), str)
                    else p
                    for p in content
                ]
        out.append(m)
    return out


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def common_prefix_length(message_lists: list[list[Message]]) -> int:
    """How many leading messages are identical in every list."""
    if not message_lists:
        return 0
    n = min(len(ms) for ms in message_lists)
    for i in range(n):
        first = canonical(message_lists[0][i])
        if any(canonical(ms[i]) != first for ms in message_lists[1:]):
            return i
    return n


def content_text(content: Any) -> str:
    """A message's content as text: strings as they are, text parts joined, other parts named."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"]
            if isinstance(p, dict) and isinstance(p.get("text"), str)
            else f"[{p.get('type', 'part')}]"
            if isinstance(p, dict)
            else str(p)
            for p in content
        )
    return canonical(content)


def render_message(m: Message) -> str:
    """A transcript entry: a ``[role]`` header, the text as is, then one line per tool call.

    Plain text rather than JSON: tool outputs are not escaped (fewer tokens, easier to read).
    """
    role = str(m.get("role"))
    if role in ("tool", "function"):
        head = f"[tool result {m.get('tool_call_id') or m.get('name') or ''}]".replace(" ]", "]")
    elif m.get("name"):
        head = f"[{role} {m['name']}]"
    else:
        head = f"[{role}]"
    lines = [head]
    text = content_text(m.get("content"))
    if text:
        lines.append(text)
    for call in m.get("tool_calls") or []:
        fn = call.get("function") or {}
        lines.append(f"[tool call {call.get('id', '')}] {fn.get('name')}({fn.get('arguments') or ''})")
    return "\n".join(lines)


def render_messages(messages: list[Message]) -> str:
    return "\n".join(render_message(m) for m in messages)


def render_tools(tools: list[Tool]) -> str:
    return "<tools>\n" + "\n".join(canonical(t) for t in tools) + "\n</tools>"


def render_additional(histories: tuple[list[Message], ...] | list[list[Message]]) -> list[str]:
    out = []
    for n, history in enumerate(histories, 1):
        out += [f'<other_conversation n="{n}">', render_messages(history), "</other_conversation>"]
    return out


def build_prompt(
    items: list[Item],
    rubric: str = DEFAULT_RUBRIC,
    *,
    max_tool_output_chars: int = 2000,
    order: list[int] | None = None,
) -> JudgePrompt:
    """The judge's messages for `items`, with identical items merged and the shared prefix sent once.

    `order` permutes the distinct trajectories in the prompt (the judge-noise pass); ids are
    always "1", "2", ... in prompt order, so a shuffled pass cannot be matched by id.
    """
    if not items:
        raise ValueError("nothing to judge: pass at least one trajectory")
    cut = [
        Item(
            cut_tool_outputs(it.messages, max_tool_output_chars),
            it.tools or None,
            tuple(cut_tool_outputs(h, max_tool_output_chars) for h in it.additional),
        )
        for it in items
    ]

    # identical trajectories (messages, tools, other conversations) are sent once and share a score
    keys = [canonical([it.messages, it.tools, it.additional]) for it in cut]
    distinct: list[int] = []  # index into items of each distinct trajectory
    slot: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key not in slot:
            slot[key] = len(distinct)
            distinct.append(i)
    order = list(range(len(distinct))) if order is None else list(order)
    if sorted(order) != list(range(len(distinct))):
        raise ValueError(f"order must be a permutation of range({len(distinct)}), got {order}")
    shown = [cut[distinct[k]] for k in order]
    id_of_slot = {k: str(pos + 1) for pos, k in enumerate(order)}

    same_tools = len({canonical(it.tools) for it in shown}) == 1
    prefix = common_prefix_length([it.messages for it in shown]) if len(shown) > 1 else 0

    parts = ["<context>"]
    if same_tools and shown[0].tools:
        parts.append(render_tools(shown[0].tools))
    parts.append(
        render_messages(shown[0].messages[:prefix]) if prefix else "(no messages shared by all trajectories)"
    )
    parts.append("</context>")
    for pos, it in enumerate(shown):
        parts.append(f'<trajectory id="{pos + 1}">')
        if not same_tools:
            parts.append(render_tools(it.tools) if it.tools else "<tools>none</tools>")
        rest = it.messages[prefix:]
        parts.append(
            render_messages(rest) if rest else "(no messages after the shared context: it stopped there)"
        )
        parts.extend(render_additional(it.additional))
        parts.append("</trajectory>")

    messages = [
        {"role": "system", "content": SYSTEM_PROMPT.format(rubric=rubric.strip())},
        {"role": "user", "content": "\n".join(parts)},
    ]
    ids = [str(pos + 1) for pos in range(len(shown))]
    item_ids = [id_of_slot[slot[key]] for key in keys]
    return JudgePrompt(messages=messages, ids=ids, item_ids=item_ids, shared_prefix=prefix)


def build_naive_prompt(
    items: list[Item], rubric: str = DEFAULT_RUBRIC, *, max_tool_output_chars: int = 2000
) -> list[Message]:
    """Every trajectory sent whole, tools included, no merging: the baseline the benchmark compares with."""
    parts = []
    for i, it in enumerate(items):
        parts.append(f'<trajectory id="{i + 1}">')
        if it.tools:
            parts.append(render_tools(it.tools))
        parts.append(render_messages(cut_tool_outputs(it.messages, max_tool_output_chars)))
        parts.extend(render_additional([cut_tool_outputs(h, max_tool_output_chars) for h in it.additional]))
        parts.append("</trajectory>")
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(rubric=rubric.strip())},
        {"role": "user", "content": "\n".join(parts)},
    ]


__all__ = [
    "CUT_MARKER",
    "DEFAULT_RUBRIC",
    "Item",
    "JudgePrompt",
    "build_naive_prompt",
    "build_prompt",
    "common_prefix_length",
    "cut_long",
    "cut_tool_outputs",
]
