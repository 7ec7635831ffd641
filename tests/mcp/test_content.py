"""MCP results and tool specs handled whole, against a real stdio server (tests/mcp/content_server.py)
that returns every content kind and sends the schemas and names real servers send."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import art_core as art
import art_mcp
from tests.mcp.content_server import PNG

CONTENT = [sys.executable, str(Path(__file__).with_name("content_server.py"))]
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


async def test_every_content_kind_reaches_the_model_and_the_trajectory() -> None:
    async with art_mcp.connect(CONTENT) as session:
        with art.capture() as traj:
            traj.turns.append(art.assistant_turn("", tool_calls=[
                {"id": "c1", "type": "function", "function": {"name": "media", "arguments": "{}"}}]))
            result = await session.call("media", {}, tool_call_id="c1")
    text = result.text
    for part in ("here is everything", "image/png", "the note body", "file:///notes.txt", "file:///scan.pdf",
                 "application/pdf", "report", "file:///report.pdf", "the quarterly report"):
        assert part in text, (part, text)
    assert "[image content]" not in text and "[resource content]" not in text
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert result.images == (image,)
    follow = result.image_message()
    assert follow is not None and follow["role"] == "user" and image in follow["content"]
    assert traj.turns[-1]["content"] == text  # the tool message the model sees
    assert traj.metadata["mcp_calls"][0]["images"] == [image]  # kept in the trajectory


async def test_tool_specs_are_what_openai_accepts_and_names_map_back() -> None:
    async with art_mcp.connect(CONTENT) as session:
        specs = {t["function"]["name"]: t["function"] for t in session.openai_tools()}
        for name, spec in specs.items():
            assert OPENAI_NAME.match(name), name
            params = spec["parameters"]
            assert params["type"] == "object" and "$schema" not in params, (name, params)
            assert not {"anyOf", "oneOf", "allOf"} & params.keys(), (name, params)
        assert len(specs) == len(session.tools)  # every name distinct after mapping
        assert "files_read_v2" in specs  # a valid name keeps itself
        dotted = session.openai_name("files.read/v2")
        assert dotted != "files_read_v2" and OPENAI_NAME.match(dotted)
        assert (await session.call(dotted, {"text": "a"})).text == 'files.read/v2 got {"text": "a"}'
        assert (await session.call("files_read_v2", {"text": "b"})).text == 'files_read_v2 got {"text": "b"}'
        long = next(t.name for t in session.tools if t.name.startswith("a_tool_whose"))
        assert len(long) > 64 and (await session.call(session.openai_name(long), {})).text.startswith(long)
        assert set(specs["either"]["parameters"]["properties"]) == {"city", "lat", "lon"}


async def test_task_required_tools_are_not_offered() -> None:
    async with art_mcp.connect(CONTENT) as session:
        assert "background" not in session.tool_names()
        assert "background" not in {t["function"]["name"] for t in session.openai_tools()}
        assert session.skipped_tools == {"background": "its execution.taskSupport is 'required' (MCP tasks)"}


async def test_progress_extends_the_timeout() -> None:
    async with art_mcp.connect(CONTENT, timeout=0.8) as session:
        busy = await session.call("slow", {"seconds": 1.6, "progress": True})
        assert not busy.is_error and busy.text == "done"
        quiet = await session.call("slow", {"seconds": 1.6})  # the server answers one request at a time: last
        assert quiet.is_error and "timed out after 0.8s" in quiet.text


@pytest.mark.parametrize("schema, expected", [
    ({"$schema": "x", "type": "object", "properties": {"a": {"type": "string"}}},
     {"type": "object", "properties": {"a": {"type": "string"}}}),
    ({"type": "integer"}, {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}),
    ({"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "number"}}}]},
     {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}},
      "description": "Give the arguments of one of these alternatives: (1) requires a; (2) any of b."}),
    ({}, {"type": "object", "properties": {}}),
])
def test_schema_conversion(schema: dict, expected: dict) -> None:
    assert art_mcp.openai_parameters(schema) == expected


@pytest.mark.parametrize("images", [False, True])
async def test_the_agent_shows_images_to_a_model_that_takes_them(images: bool) -> None:
    from tests.support.scripted_openai import ScriptedOpenAI

    script = [{"tool_calls": [{"name": "media", "arguments": {}}]},
              {"tool_calls": [{"name": "complete_task", "arguments": {"answer": "seen"}}]}]
    with ScriptedOpenAI(script) as llm:
        model = art.Model(name="agent", inference_base_url=llm.url, inference_api_key="x")
        async with art_mcp.connect(CONTENT) as session:
            traj = await art_mcp.rollout(model, session, "Look at the media.", images=images)
        second = llm.requests[1]["messages"]
    assert [m["role"] for m in second][-2:] == (["tool", "user"] if images else ["assistant", "tool"])
    if images:
        assert second[-1]["content"][1] == {"type": "image_url",
                                            "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert traj.metadata["mcp_calls"][0]["images"]  # kept in the trajectory either way
