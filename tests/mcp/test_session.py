"""connect(): real MCP servers over stdio and streamable HTTP; tool calls land in the trajectory."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from mcp.client.stdio import StdioServerParameters

import art_mcp
from art_core import Trajectory, assistant_turn, capture

from .conftest import alive, notes_over_http

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)


def _call(id_: str, name: str, args: dict) -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


async def test_call_records_tool_message_with_details(flaky):
    async with art_mcp.connect(flaky) as session:
        traj = Trajectory(messages=[{"role": "user", "content": "echo hi"}])
        traj.turns.append(assistant_turn(None, tool_calls=[_call("c1", "echo", {"text": "hi"})]))
        with capture(traj):
            result = await session.call("echo", '{"text": "hi"}', tool_call_id="c1")
    assert result.text == "hi" and not result.is_error and result.structured == {"result": "hi"}
    assert traj.turns[-1] == {"role": "tool", "tool_call_id": "c1", "content": "hi", "name": "echo"}
    [entry] = traj.metadata["mcp_calls"]
    assert entry["name"] == "echo" and entry["arguments"] == {"text": "hi"} and entry["is_error"] is False
    assert entry["structured"] == {"result": "hi"} and entry["latency_s"] > 0
    assert traj.metrics["mcp/calls"] == 1 and traj.metrics["mcp/errors"] == 0


async def test_openai_tools_from_input_schema():
    async with art_mcp.connect(art_mcp.bundled_server("notes")) as session:
        tools = session.openai_tools()
        only = session.openai_tools(include=["get_note"])
        with pytest.raises(ValueError, match="unknown tools \\['nope'\\]"):
            session.openai_tools(include=["nope"])
    by_name = {t["function"]["name"]: t for t in tools}
    assert set(by_name) == {
        "add_note",
        "get_note",
        "update_note",
        "delete_note",
        "list_notes",
        "search_notes",
    }
    add = by_name["add_note"]
    assert add["type"] == "function"
    assert add["function"]["parameters"]["required"] == ["title", "body"]
    assert add["function"]["parameters"]["properties"]["title"]["type"] == "string"
    assert "unique title" in add["function"]["description"]
    assert [t["function"]["name"] for t in only] == ["get_note"]


async def test_server_spec_forms(flaky):
    params = StdioServerParameters(command=flaky[0], args=flaky[1:])
    for spec in (" ".join(flaky), flaky, params):
        async with art_mcp.connect(spec) as session:
            assert (await session.call("echo", {"text": "x"})).text == "x"
    with pytest.raises(ValueError, match="empty string"):
        art_mcp.resolve_server("  ")
    with pytest.raises(TypeError, match="command line string, an argument list"):
        art_mcp.resolve_server(42)  # type: ignore[arg-type]
    assert art_mcp.resolve_server("https://example.com/mcp") == "https://example.com/mcp"


async def test_tool_errors_become_error_messages(flaky):
    async with art_mcp.connect(flaky) as session:
        with capture() as traj:
            raised = await session.call("fail", {"reason": "bad input"})
            unknown = await session.call("nope", {})
            bad_json = await session.call("echo", "{not json")
            bad_args = await session.call("echo", {"text": 5, "extra": []})
            after = await session.call("echo", {"text": "still fine"})
    assert raised.is_error and "failed on purpose: bad input" in raised.text
    assert unknown.is_error and "unknown tool 'nope'" in unknown.text and "echo" in unknown.text
    assert bad_json.is_error and "not valid JSON" in bad_json.text
    assert bad_args.is_error and bad_args.text.startswith("Error")
    assert not after.is_error and after.text == "still fine"
    assert [m["content"].startswith("Error") for m in traj.turns] == [True, True, True, True, False]
    assert traj.metrics["mcp/errors"] == 4


async def test_timeout_becomes_error_message_and_session_survives(flaky):
    async with art_mcp.connect(flaky, timeout=0.5) as session:
        with capture() as traj:
            slow = await session.call("hang", {"seconds": 2})
            fast = await session.call("echo", {"text": "ok"})
    assert slow.is_error and "timed out after 0.5s" in slow.text
    assert 0.5 <= slow.latency_s < 1.5
    assert fast.text == "ok"
    assert traj.turns[0]["content"] == "Error: tool 'hang' timed out after 0.5s"


async def test_crash_raises_and_leaves_no_process(flaky):
    async with art_mcp.connect(flaky) as session:
        pid = int((await session.call("whoami")).text)
        assert alive(pid)
        with pytest.raises(art_mcp.ServerCrashed, match="stopped during a call to tool 'die'") as info:
            await session.call("die", {"code": 3})
        assert "dying on request" in str(info.value)  # its stderr tail
        assert session.crashed is info.value
        with pytest.raises(art_mcp.ServerCrashed, match="was called after that"):
            await session.call("echo", {"text": "x"})
    assert not alive(pid)


async def test_process_stops_when_block_exits_even_on_error_or_cancel(flaky):
    with pytest.raises(KeyError):
        async with art_mcp.connect(flaky) as session:
            pid1 = int((await session.call("whoami")).text)
            raise KeyError("user error passes through unchanged")
    assert not alive(pid1)

    started = asyncio.Event()
    pids: list[int] = []

    async def stuck() -> None:
        async with art_mcp.connect(flaky) as session:
            pids.append(int((await session.call("whoami")).text))
            started.set()
            await session.call("hang", {"seconds": 30})

    task = asyncio.create_task(stuck())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):  # the shielded shutdown may escalate to SIGTERM while the tool hangs
        if not alive(pids[0]):
            break
        await asyncio.sleep(0.1)
    assert not alive(pids[0])


async def test_start_errors_name_the_problem():
    with pytest.raises(art_mcp.ServerStartError, match="command was not found"):
        async with art_mcp.connect("no-such-mcp-server-binary --flag"):
            pass
    script = "import sys; print('missing API key', file=sys.stderr); sys.exit(2)"
    with pytest.raises(
        art_mcp.ServerStartError, match="before the MCP handshake finished(.|\n)*missing API key"
    ):
        async with art_mcp.connect([sys.executable, "-c", script]):
            pass
    hang = "import time; time.sleep(30)"
    with pytest.raises(art_mcp.ServerStartError, match="within 0.5s"):
        async with art_mcp.connect([sys.executable, "-c", hang], startup_timeout=0.5):
            pass


async def test_streamable_http(notes_http):
    async with art_mcp.connect(notes_http) as session:
        assert "add_note" in session.tool_names()
        with capture() as traj:
            added = await session.call("add_note", {"title": "http", "body": "over the wire"})
            found = await session.call("search_notes", {"query": "wire"})
            missing = await session.call("get_note", {"note_id": 999})
    assert added.structured["title"] == "http"
    assert found.structured["result"][0]["body"] == "over the wire" and "over the wire" in found.text
    assert missing.is_error and "no note with id 999" in missing.text
    assert len(traj.turns) == 3


async def test_http_server_going_away_fails_the_rollout():
    with notes_over_http() as (url, proc):
        async with art_mcp.connect(url) as session:
            assert not (await session.call("list_notes")).is_error
            proc.kill()
            proc.wait()
            with pytest.raises(
                art_mcp.ServerCrashed, match=f"MCP server {url} stopped during a call to tool 'list_notes'"
            ):
                await session.call("list_notes")


async def test_a_huge_result_is_cut_with_a_marker_and_counted(flaky):
    async with art_mcp.connect(flaky) as session:
        with capture() as traj:
            huge = await session.call("big", {"chars": 1_000_000})
            small = await session.call("big", {"chars": 10})
    # before: all 1,000,000 characters were recorded and went to the model
    assert len(huge.text) < 100_200 and huge.text.startswith("x" * 100_000)
    assert huge.text.endswith("[tool output cut: 1000000 characters, the first 100000 kept; pass max_output_chars= to "
                              "art_mcp.connect or ServerPool (or set session.max_output_chars) to keep more]")
    assert traj.turns[0]["content"] == huge.text and small.text == "x" * 10
    assert traj.metrics["mcp/truncated_results"] == 1 and traj.metrics["mcp/truncated_chars"] == 900_000
    assert traj.metadata["mcp_calls"][0]["cut_chars"] == 900_000 and "structured" not in traj.metadata["mcp_calls"][0]
    async with art_mcp.connect(flaky, max_output_chars=None) as session:
        assert len((await session.call("big", {"chars": 200_000})).text) == 200_000
