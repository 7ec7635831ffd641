"""The judge's prompt: shared prefix once, duplicates merged, tools shown, long tool outputs cut."""

from __future__ import annotations

import json

import pytest

from art_core import Trajectory, assistant_turn
from ruler.prompt import (
    CUT_MARKER,
    DEFAULT_RUBRIC,
    Item,
    build_naive_prompt,
    build_prompt,
    common_prefix_length,
    cut_long,
    cut_tool_outputs,
)

SYSTEM = {"role": "system", "content": "You are an email agent. " * 20}
USER = {"role": "user", "content": "Find the invoice from ACME."}
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]


def conv(*tail: dict) -> list[dict]:
    return [SYSTEM, USER, *tail]


def test_common_prefix_is_message_level() -> None:
    a = conv({"role": "assistant", "content": "x"})
    b = conv({"role": "assistant", "content": "y"})
    assert common_prefix_length([a, b]) == 2
    assert common_prefix_length([a, a[:2]]) == 2  # one stopped where the other went on
    assert common_prefix_length([a, [USER]]) == 0
    assert common_prefix_length([]) == 0


def test_shared_prefix_sent_once_and_remainders_separately() -> None:
    items = [Item(conv({"role": "assistant", "content": f"answer {i}"}), TOOLS) for i in range(3)]
    prompt = build_prompt(items)
    user = prompt.messages[1]["content"]
    assert prompt.shared_prefix == 2
    assert user.count("You are an email agent.") == 20  # the system prompt appears once
    assert user.count('"name":"search"') == 1  # shared tools appear once, in the context
    context, rest = user.split("</context>")
    assert "Find the invoice" in context and "answer" not in context
    for i in range(3):
        assert f'<trajectory id="{i + 1}">\n[assistant]\nanswer {i}\n</trajectory>' in rest
    assert prompt.ids == ["1", "2", "3"] and prompt.item_ids == ["1", "2", "3"]
    assert DEFAULT_RUBRIC.splitlines()[0] in prompt.messages[0]["content"]


def test_identical_trajectories_sent_once_and_share_an_id() -> None:
    a = Item(conv({"role": "assistant", "content": "same"}), TOOLS)
    b = Item(conv({"role": "assistant", "content": "other"}), TOOLS)
    prompt = build_prompt([a, b, a, a])
    assert prompt.ids == ["1", "2"]
    assert prompt.item_ids == ["1", "2", "1", "1"]
    assert prompt.messages[1]["content"].count("same") == 1


def test_same_messages_with_different_tools_are_different_trajectories() -> None:
    other_tools = [{"type": "function", "function": {"name": "delete_all", "parameters": {}}}]
    prompt = build_prompt([Item(conv(), TOOLS), Item(conv(), other_tools)])
    user = prompt.messages[1]["content"]
    assert prompt.ids == ["1", "2"]
    _, rest = user.split("</context>")
    assert '"name":"search"' in rest and '"name":"delete_all"' in rest  # each with its own tools


def test_transcript_rendering() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "ACME"}'}}
    msgs = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": 'line 1\n"quoted" line 2'},
        {"role": "user", "name": "bob", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {}}]},
    ]
    text = build_prompt([Item(msgs), Item(msgs[:1])]).messages[1]["content"]
    assert '[assistant]\n[tool call c1] search({"q": "ACME"})' in text
    assert '<trajectory id="1">\n[tool result c1]\nline 1\n"quoted" line 2\n[user bob]\nsee\n[image_url]\n</trajectory>' in text


def test_token_ids_and_logprobs_never_sent() -> None:
    traj = Trajectory(messages=conv(), tools=TOOLS)
    traj.turns.append(assistant_turn("sampled reply", token_ids=[4711, 4712], logprobs=[-0.5, -0.25], step=3))
    prompt = build_prompt([Item(traj.messages(), traj.tools), Item(conv(), TOOLS)])
    text = json.dumps(prompt.messages)
    assert "sampled reply" in text
    assert "4711" not in text and "-0.25" not in text and '"sample"' not in text


def test_long_tool_output_cut_with_visible_marker() -> None:
    long = "A" * 3000 + "MIDDLE" + "Z" * 3000
    msgs = conv({"role": "tool", "tool_call_id": "c1", "content": long}, {"role": "assistant", "content": "A" * 5000})
    out = cut_tool_outputs(msgs, 600)
    assert out[2]["content"].startswith("A" * 400)
    assert out[2]["content"].endswith("Z" * 200)
    assert CUT_MARKER.format(n=len(long) - 600) in out[2]["content"]
    assert "MIDDLE" not in out[2]["content"]
    assert out[3]["content"] == "A" * 5000  # only tool outputs are cut
    assert msgs[2]["content"] == long  # the input is not modified
    parts = cut_tool_outputs([{"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": long}]}], 100)
    assert "characters cut by RULER" in parts[0]["content"][0]["text"]
    assert cut_long("short", 100) == "short"
    prompt = build_prompt([Item(msgs), Item(conv())], max_tool_output_chars=600)
    assert "characters cut by RULER" in prompt.messages[1]["content"]
    assert "MIDDLE" not in prompt.messages[1]["content"]


def test_order_permutes_trajectories_and_renumbers_them() -> None:
    items = [Item(conv({"role": "assistant", "content": f"answer {i}"})) for i in range(3)]
    prompt = build_prompt(items, order=[2, 0, 1])
    user = prompt.messages[1]["content"]
    assert user.index("answer 2") < user.index("answer 0") < user.index("answer 1")
    assert prompt.item_ids == ["2", "3", "1"]  # item 0 is shown second, item 2 first
    with pytest.raises(ValueError, match="permutation"):
        build_prompt(items, order=[0, 0, 1])


def test_custom_rubric_and_additional_histories() -> None:
    sub = [{"role": "user", "content": "sub-agent task"}, {"role": "assistant", "content": "sub-agent answer"}]
    prompt = build_prompt([Item(conv(), None, (sub,)), Item(conv())], "Shorter answers win.")
    assert "Shorter answers win." in prompt.messages[0]["content"]
    assert DEFAULT_RUBRIC.splitlines()[0] not in prompt.messages[0]["content"]
    assert '<other_conversation n="1">' in prompt.messages[1]["content"]
    assert prompt.ids == ["1", "2"]


def test_naive_prompt_repeats_everything() -> None:
    items = [Item(conv({"role": "assistant", "content": "same"}), TOOLS) for _ in range(4)]
    naive = build_naive_prompt(items)[1]["content"]
    assert naive.count("Find the invoice") == 4 and naive.count('"name":"search"') == 4


def test_empty_group_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        build_prompt([])


def test_answer_parsing_is_lenient_in_form_and_strict_in_content() -> None:
    from ruler.judge import BadAnswer, extract_json, parse_answer

    plain = '{"scores": [{"trajectory_id": 1, "explanation": "good", "score": "0.8"}, {"trajectory_id": "2", "explanation": "bad", "score": 0}]}'
    assert {i: s.score for i, s in parse_answer(plain, ["1", "2"]).items()} == {"1": 0.8, "2": 0.0}
    prose = f"My ranking {{first}} then:\n{plain}\nDone."
    assert extract_json(prose)["scores"][0]["explanation"] == "good"
    bare_list = '[{"trajectory_id": "1", "explanation": "x", "score": 1}]'
    assert extract_json(bare_list) == {"scores": [{"trajectory_id": "1", "explanation": "x", "score": 1}]}
    # a raw tab in an explanation (xgrammar's maxLength strings admit one; CI's tiny judge wrote it)
    tabbed = '{"scores": [{"trajectory_id": "1", "explanation": "{} a\tb", "score": 1}]}'
    assert parse_answer(tabbed, ["1"])["1"].explanation == "{} a\tb"
    with pytest.raises(BadAnswer, match="scored twice"):
        parse_answer('{"scores": [{"trajectory_id": "1", "explanation": "", "score": 1}, {"trajectory_id": "1", "explanation": "", "score": 0}]}', ["1"])
    with pytest.raises(BadAnswer, match="schema"):
        parse_answer('{"scores": [{"trajectory_id": "1", "score": 1}]}', ["1"])
    with pytest.raises(BadAnswer, match="out of range"):
        parse_answer('{"scores": [{"trajectory_id": "1", "explanation": "", "score": NaN}]}', ["1"])
    with pytest.raises(BadAnswer, match="empty"):
        parse_answer("  ", ["1"])
