"""The bundled servers, over real stdio."""

from __future__ import annotations

import subprocess
import sys

import pytest

import art_mcp


async def test_calculator():
    async with art_mcp.connect(art_mcp.bundled_server("calculator")) as s:
        assert (await s.call("calculate", {"expression": "(3 + 4) * 2 ** 3"})).structured == {"result": 56.0}
        assert (await s.call("calculate", {"expression": "sqrt(16) + abs(-2)"})).text == "6.0"
        evil = await s.call("calculate", {"expression": "__import__('os').system('true')"})
        assert evil.is_error and "unsupported syntax" in evil.text
        assert "division by zero" in (await s.call("calculate", {"expression": "1 / 0"})).text
        assert (
            await s.call("convert_units", {"value": 1, "from_unit": "mi", "to_unit": "km"})
        ).structured == {"result": pytest.approx(1.609344)}
        assert (
            await s.call("convert_units", {"value": 212, "from_unit": "F", "to_unit": "C"})
        ).structured == {"result": pytest.approx(100.0)}
        mixed = await s.call("convert_units", {"value": 1, "from_unit": "kg", "to_unit": "m"})
        assert mixed.is_error and "cannot convert mass (kg) to length (m)" in mixed.text
        unknown = await s.call("convert_units", {"value": 1, "from_unit": "parsec", "to_unit": "m"})
        assert unknown.is_error and "unknown unit 'parsec'" in unknown.text


async def test_notes():
    async with art_mcp.connect(art_mcp.bundled_server("notes")) as s:
        a = (
            await s.call("add_note", {"title": "Dentist", "body": "Friday 3pm", "tags": ["Health"]})
        ).structured
        b = (await s.call("add_note", {"title": "Groceries", "body": "eggs, milk"})).structured
        assert a == {"id": 1, "title": "Dentist", "body": "Friday 3pm", "tags": ["health"]} and b["id"] == 2
        dup = await s.call("add_note", {"title": "Dentist", "body": "again"})
        assert dup.is_error and "already exists" in dup.text
        assert [n["id"] for n in (await s.call("list_notes", {"tag": "health"})).structured["result"]] == [1]
        assert [n["id"] for n in (await s.call("search_notes", {"query": "MILK"})).structured["result"]] == [
            2
        ]
        assert (await s.call("update_note", {"note_id": 2, "body": "bread"})).structured["body"] == "bread"
        assert (await s.call("delete_note", {"note_id": 1})).text == "deleted note 1"
        gone = await s.call("get_note", {"note_id": 1})
        assert gone.is_error and "no note with id 1" in gone.text
        assert [n["title"] for n in (await s.call("list_notes")).structured["result"]] == ["Groceries"]


def test_bundled_server_names():
    with pytest.raises(
        ValueError, match="no bundled MCP server named 'nope'; choose one of notes, calculator"
    ):
        art_mcp.bundled_server("nope")
    out = subprocess.run(
        [sys.executable, "-m", "art_mcp.servers.calculator", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--http PORT" in out.stdout
