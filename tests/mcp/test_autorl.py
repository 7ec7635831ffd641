"""AutoRL task generation through litellm against a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import json

import pytest

import art_mcp
from art_mcp import Task
from tests.support.scripted_openai import ScriptedOpenAI

NOTES_TOOLS = [
    {
        "type": "function",
        "function": {"name": "add_note", "parameters": {"type": "object", "properties": {}}},
    },
    {
        "type": "function",
        "function": {"name": "search_notes", "parameters": {"type": "object", "properties": {}}},
    },
]


def _reply(*tasks: tuple[str, int, list[str]]) -> dict:
    return {
        "content": json.dumps(
            {"tasks": [{"task": t, "difficulty": d, "tools": tools} for t, d, tools in tasks]}
        )
    }


def test_similarity_by_hand():
    # trigrams of "save a note now": (save a note), (a note now); of "save a note today": (save a note), (a note today)
    # shared 1 of 3 distinct -> 1/3
    assert art_mcp.similarity("save a note now", "Save a note, today") == pytest.approx(1 / 3)
    assert art_mcp.similarity("Find the dentist note", "find  the DENTIST note!") == 1.0
    assert art_mcp.similarity("convert 5 km to miles", "list every note tagged work") == 0.0


def test_dedupe_keeps_first_of_near_duplicates():
    tasks = [
        Task(task="Save a note titled groceries with eggs and milk", difficulty=1),
        Task(task="Save a note titled groceries with eggs and milk please", difficulty=2),
        Task(task="Search my notes for anything about the dentist", difficulty=2),
    ]
    kept = art_mcp.dedupe(tasks)
    assert [t.difficulty for t in kept] == [1, 2] and kept[1].task.startswith("Search")
    assert art_mcp.dedupe(tasks[2:], keep=tasks[2:]) == []


async def test_generate_validates_dedupes_and_asks_again():
    first = _reply(
        ("Save a note titled groceries with body eggs", 1, ["add_note"]),
        ("Save a note titled groceries with body eggs and milk", 2, ["add_note"]),  # near-duplicate
        ("too short", 2, []),  # under 12 characters
        ("Delete every note tagged old after listing them", 9, []),  # difficulty out of range
        ("Email the notes to my boss at work today", 3, ["send_email"]),  # a tool the server lacks
    )
    second = _reply(
        ("Save a note titled groceries with body eggs", 1, ["add_note"]),  # repeats a kept one
        ("Find the note about the dentist and tell me the day", 3, ["search_notes"]),
        ("Save three notes for Monday, Tuesday and Wednesday meetings", 4, ["add_note"]),
    )
    with ScriptedOpenAI([first, second]) as llm:
        tasks = await art_mcp.generate_tasks(
            NOTES_TOOLS,
            3,
            generator="openai/task-writer",
            instructions="Tasks about a family's shared notes.",
            litellm_params={"api_base": llm.url, "api_key": "x"},
        )
    assert [t.task for t in tasks] == [
        "Save a note titled groceries with body eggs",
        "Find the note about the dentist and tell me the day",
        "Save three notes for Monday, Tuesday and Wednesday meetings",
    ]
    assert [t.difficulty for t in tasks] == [1, 3, 4] and len({t.id for t in tasks}) == 3
    assert len(llm.requests) == 2
    body = llm.requests[0]
    assert body["model"] == "task-writer"
    assert body["response_format"]["type"] == "json_schema"
    assert "tasks" in body["response_format"]["json_schema"]["schema"]["properties"]
    prompt = body["messages"][0]["content"]
    assert (
        '"name": "search_notes"' in prompt
        and "family's shared notes" in prompt
        and "Write 3 realistic" in prompt
    )
    again = llm.requests[1]["messages"][0]["content"]
    assert "Write 2 realistic" in again and "- Save a note titled groceries with body eggs" in again


async def test_generate_from_a_live_session_and_failures():
    reply = _reply(("Save a note titled plan with body ship on Friday", 2, ["add_note"]))
    with ScriptedOpenAI([{"content": "not json at all"}, reply]) as llm:
        async with art_mcp.connect(art_mcp.bundled_server("notes")) as session:
            tasks = await art_mcp.generate_tasks(
                session,
                5,
                generator="openai/g",
                litellm_params={"api_base": llm.url, "api_key": "x"},
                max_rounds=3,
            )
    assert [t.tools for t in tasks] == [["add_note"]]  # fewer than asked: the rest were duplicates
    assert "update_note" in llm.requests[0]["messages"][0]["content"]
    with ScriptedOpenAI({"content": "{}"}) as llm:
        with pytest.raises(art_mcp.TaskGenerationError, match="no usable tasks in 2 calls"):
            await art_mcp.generate_tasks(
                NOTES_TOOLS,
                2,
                generator="openai/g",
                litellm_params={"api_base": llm.url, "api_key": "x"},
                max_rounds=2,
            )
    with pytest.raises(ValueError, match="no tools given"):
        await art_mcp.generate_tasks([], 2)


def test_split_save_load(tmp_path):
    tasks = [Task(task=f"Save a note called item number {i}", difficulty=1 + i % 5) for i in range(10)]
    train, val = art_mcp.split_tasks(tasks, val_fraction=0.2, seed=1)
    assert (
        len(train) == 8
        and len(val) == 2
        and {t.id for t in train} | {t.id for t in val} == {t.id for t in tasks}
    )
    assert art_mcp.split_tasks(tasks, val_fraction=0.2, seed=1) == (train, val)
    small_train, small_val = art_mcp.split_tasks(tasks[:2], val_fraction=0.9)  # each side keeps one
    assert len(small_train) == 1 and len(small_val) == 1
    with pytest.raises(ValueError, match="need at least 2 tasks"):
        art_mcp.split_tasks(tasks[:1])
    path = art_mcp.save_tasks(tmp_path / "sub" / "train.jsonl", train)
    assert len(path.read_text().splitlines()) == 8
    assert art_mcp.load_tasks(path) == train
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"task": "Save a note called x please", "difficulty": 1}\n{"task": "ok task text here", "difficulty": 7}\n'
    )
    with pytest.raises(ValueError, match="bad.jsonl:2 is not a valid task"):
        art_mcp.load_tasks(bad)
