"""The handler's fast message converter yields exactly what langchain's `convert_to_openai_messages` does."""

from __future__ import annotations

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)

from art_graph.handler import _fast_openai, to_openai

CALL = {"name": "add", "args": {"a": 1, "b": [2, 3], "note": "größer ✓"}, "id": "call_1", "type": "tool_call"}

COMMON: list[BaseMessage] = [
    SystemMessage("You are terse."),
    SystemMessage(""),
    HumanMessage("What is 2+2?"),
    HumanMessage("hi", name="alice", id="m-1"),
    HumanMessage(""),
    AIMessage("4"),
    AIMessage("", tool_calls=[CALL]),
    AIMessage("let me add", tool_calls=[CALL, {**CALL, "id": "call_2", "args": {}}], id="run-1"),
    AIMessage("", tool_calls=[{**CALL, "id": None}]),
    AIMessage("no", name="bot", additional_kwargs={"refusal": "I can't"}),
    AIMessage("fine", additional_kwargs={"refusal": ""}),
    AIMessage(
        "x",
        response_metadata={"finish_reason": "stop"},
        usage_metadata={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    ),
    AIMessageChunk(
        content="streamed", tool_call_chunks=[{"name": "add", "args": '{"a": 1}', "id": "c", "index": 0}]
    ),
    ToolMessage("3", tool_call_id="call_1"),
    ToolMessage("3", tool_call_id="call_1", name="add", id="t-1"),
    ToolMessage("", tool_call_id="call_2", status="error"),
]

OTHER: list[BaseMessage] = [
    HumanMessage(
        [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    ),
    HumanMessage([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
    HumanMessage(["plain", {"type": "text", "text": "block"}]),
    HumanMessage([]),
    AIMessage([{"type": "text", "text": "answer"}], tool_calls=[CALL]),
    ToolMessage([{"type": "text", "text": "3"}], tool_call_id="call_1"),
    SystemMessage("be brief", additional_kwargs={"__openai_role__": "developer"}),
    ChatMessage(role="critic", content="meh"),
    FunctionMessage(name="add", content="3"),
]


def langchains(m: BaseMessage) -> list[dict]:
    return [
        {k: v for k, v in d.items() if v is not None or k == "content"}
        for d in convert_to_openai_messages([m])
    ]


@pytest.mark.parametrize("message", COMMON + OTHER, ids=lambda m: f"{type(m).__name__}")
def test_same_dicts_as_langchain(message: BaseMessage) -> None:
    ours = to_openai([message])
    assert ours == langchains(message)
    assert [list(d) for d in ours] == [list(d) for d in langchains(message)]  # key order too


def test_common_shapes_take_the_fast_path_and_others_do_not() -> None:
    assert all(_fast_openai(m) is not None for m in COMMON)
    assert all(_fast_openai(m) is None for m in OTHER)


def test_a_list_keeps_order_across_both_paths() -> None:
    messages = [COMMON[0], OTHER[0], COMMON[6], COMMON[13], OTHER[6]]
    assert to_openai(messages) == [d for m in messages for d in langchains(m)]
