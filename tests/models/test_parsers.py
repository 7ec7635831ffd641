"""Every family's tool-call parser on text its models really emit, and on malformed text (kept as
content, flagged in `error`, never raised)."""

from __future__ import annotations

import json

import pytest

from art_train.engines.tool_parsers import gemma3, get_tool_parser, harmony, hermes, llama3_json, qwen3


def calls(parsed):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]


def test_hermes_tagged_calls_and_leading_text():
    text = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n' \
           '<tool_call>{"name": "mul", "arguments": {"a": 4, "b": 5}}</tool_call>'
    parsed = hermes(text)
    assert calls(parsed) == [("add", {"a": 2, "b": 3}), ("mul", {"a": 4, "b": 5})]
    assert parsed.content == "Let me add." and parsed.error is None


def test_hermes_reads_qwen_coder_bare_json_and_fenced_json():
    # What Qwen2.5-Coder-0.5B really emits on a tool prompt: the call without the tags.
    assert calls(hermes('{"name": "get_weather", "arguments": {"city": "Paris"}}')) == [("get_weather", {"city": "Paris"})]
    fenced = '```json\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```'
    assert calls(hermes(fenced)) == [("add", {"a": 1, "b": 2})]
    two = '{"name": "add", "arguments": {"a": 1}}\n{"name": "add", "arguments": {"a": 2}}'
    assert [c[1] for c in calls(hermes(two))] == [{"a": 1}, {"a": 2}]
    # arguments given as a JSON string are decoded
    assert calls(hermes('{"name": "f", "arguments": "{\\"x\\": 1}"}')) == [("f", {"x": 1})]


@pytest.mark.parametrize("text", [
    "The answer is 5.",
    "[1] first point",  # opens like JSON, is prose
    '{"answer": 5}',  # JSON, but no tool name: a JSON answer, flagged
])
def test_hermes_plain_text_is_content(text):
    parsed = hermes(text)
    assert parsed.tool_calls == [] and parsed.content == text


@pytest.mark.parametrize("text, reason", [
    ('<tool_call>{"name": "add", "arguments": {"a": 2,</tool_call>', "not valid JSON"),
    ('<tool_call>{"arguments": {"a": 2}}</tool_call>', "no tool name"),
    ('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', "object arguments"),
    ('{"name": "add", "arguments": {"a": 2', "not valid JSON"),
    ('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><tool_call>oops</tool_call>', "not valid JSON"),
])
def test_hermes_malformed_is_kept_as_content_and_flagged(text, reason):
    parsed = hermes(text)
    assert parsed.tool_calls == [] and parsed.content == text
    assert parsed.error is not None and reason in parsed.error


def test_hermes_unclosed_tag_at_end_of_text_still_parses():
    assert calls(hermes('<tool_call>{"name": "add", "arguments": {"a": 1}}')) == [("add", {"a": 1})]


def test_qwen3_keeps_thinking_in_content_and_ignores_calls_inside_it():
    text = ('<think>\nI could write <tool_call>{"name": "wrong", "arguments": {}}</tool_call> but no.\n</think>\n\n'
            '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>')
    parsed = qwen3(text)
    assert calls(parsed) == [("add", {"a": 1, "b": 2})]
    assert parsed.content.startswith("<think>") and parsed.content.endswith("</think>")
    plain = qwen3("<think>\nhm\n</think>\n\nIt is 3.")
    assert plain.tool_calls == [] and plain.content == "<think>\nhm\n</think>\n\nIt is 3."
    bad = qwen3('<think>x</think><tool_call>{"name": </tool_call>')
    assert bad.tool_calls == [] and bad.error and "<tool_call>" in bad.content


def test_llama3_json_python_tag_and_builtin_calls():
    assert calls(llama3_json('{"name": "add", "parameters": {"a": 1, "b": 2}}')) == [("add", {"a": 1, "b": 2})]
    tagged = '<|python_tag|>{"name": "add", "parameters": {"a": 1}}; {"name": "mul", "parameters": {"a": 2}}'
    assert calls(llama3_json(tagged)) == [("add", {"a": 1}), ("mul", {"a": 2})]
    builtin = llama3_json('<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>')
    assert calls(builtin) == [("brave_search", {"query": "weather in Paris"})]
    assert llama3_json("Hello there.").content == "Hello there."


def test_llama3_malformed_is_kept_and_flagged():
    for text in ['<|python_tag|>{"name": "add", "parameters": {', "<|python_tag|>print(1)",
                 '{"name": "add", "parameters": "not json"}']:
        parsed = llama3_json(text)
        assert parsed.tool_calls == [] and parsed.content == text and parsed.error, text


def test_harmony_channels_and_call():
    text = ('<|channel|>analysis<|message|>Need to add 2 and 3.<|end|>'
            '<|start|>assistant to=functions.add<|channel|>commentary json<|message|>{"a": 2, "b": 3}')
    parsed = harmony(text)
    assert calls(parsed) == [("add", {"a": 2, "b": 3})]
    assert parsed.reasoning == "Need to add 2 and 3." and parsed.content is None
    # recipient after the channel (both orders occur), and a final answer
    other = harmony('<|channel|>commentary to=functions.mul <|constrain|>json<|message|>{"a": 1}<|call|>')
    assert calls(other) == [("mul", {"a": 1})]
    final = harmony('<|channel|>analysis<|message|>easy<|end|><|start|>assistant<|channel|>final<|message|>5')
    assert final.content == "5" and final.reasoning == "easy" and final.tool_calls == []
    assert harmony("no markers at all").content == "no markers at all"


def test_harmony_malformed_arguments_kept_and_flagged():
    parsed = harmony('<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 2,')
    assert parsed.tool_calls == [] and parsed.error and "add" in parsed.error
    assert parsed.content == '{"a": 2,'


def test_gemma3_fenced_bare_and_prose():
    fenced = '```tool_code\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```'
    assert calls(gemma3(fenced)) == [("add", {"a": 1, "b": 2})]
    assert calls(gemma3('{"name": "add", "arguments": {"a": 1}}')) == [("add", {"a": 1})]
    lead = gemma3('Sure.\n```tool_code\n{"name": "add", "arguments": {"a": 1}}\n```')
    assert calls(lead) == [("add", {"a": 1})] and lead.content == "Sure."
    assert gemma3("It is 4.").content == "It is 4."
    bad = gemma3('```tool_code\nadd(a=1)\n```')
    assert bad.tool_calls == [] and bad.error and bad.content == '```tool_code\nadd(a=1)\n```'


@pytest.mark.parametrize("name", ["hermes", "qwen3", "llama3_json", "harmony", "gemma3"])
@pytest.mark.parametrize("text", ["", "<tool_call>", "<|message|>", "{", "```", "<|python_tag|>", "\x00\ufffd",
                                  "<|start|><|message|><|call|>", '{"name": 5}', "[" * 50])
def test_no_parser_raises_on_junk(name, text):
    parsed = get_tool_parser(name)(text)
    assert isinstance(parsed.tool_calls, list)
    assert parsed.tool_calls == [] or all(c["function"]["name"] for c in parsed.tool_calls)


def test_unknown_parser_names_the_known_ones():
    with pytest.raises(ValueError, match="harmony"):
        get_tool_parser("nope")
