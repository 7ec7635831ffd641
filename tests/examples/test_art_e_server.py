"""The ART-E MCP server over real stdio, the agent rollout against it, and the scripted teacher."""

from __future__ import annotations

import json
import sqlite3

import pytest

import art_core as art
import art_mcp
from examples.art_e import server as server_module
from examples.art_e.inbox import dataset, generate_inbox, write_db
from examples.art_e.rollout import InboxServers, rollout, server_params
from examples.art_e.teacher import spoken, teach, teach_inboxes
from tests.support.scripted_openai import ScriptedOpenAI

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)


@pytest.fixture(scope="module")
def inboxes():
    return [generate_inbox(1000), generate_inbox(1001)]


@pytest.fixture(scope="module")
def db(inboxes, tmp_path_factory):
    return write_db(inboxes, tmp_path_factory.mktemp("art-e") / "inboxes.sqlite")


async def test_tools_over_stdio(db, inboxes):
    inbox = inboxes[0]
    async with art_mcp.connect(server_params(db, inbox.id)) as session:
        assert session.tool_names() == ["search_emails", "read_email", "return_final_answer"]
        q = next(q for q in inbox.questions if len(q.sources) >= 2)
        found = await session.call("search_emails", {"keywords": list(q.plan[0])})
        assert not found.is_error and all(f"[{s}]" in found.text for s in q.sources)
        email = inbox.email(q.sources[0])
        text = (await session.call("read_email", {"message_id": email.id})).text
        assert f"id: {email.id}" in text and email.body in text and email.subject in text
        # filters: sender, date range; every listed email satisfies them
        sender = email.sender.name.split()[0]
        day = email.date[:10]
        hits = (await session.call("search_emails", {"keywords": q.plan[0][0], "from_addr": sender,
                                                     "after": day, "before": "2025-12-31"})).text  # fmt: skip
        assert f"[{email.id}]" in hits
        for line in hits.splitlines()[1:]:
            assert line.split()[1] >= day and sender in line
        none = await session.call("search_emails", {"keywords": [q.plan[0][0]], "before": "2025-01-01"})
        assert none.text.startswith("No emails match")
        # mistakes come back as errors that say what to do
        bad = await session.call("read_email", {"message_id": "00000000"})
        assert bad.is_error and "search_emails" in bad.text
        bad = await session.call("search_emails", {"keywords": ["x"], "after": "March 3"})
        assert bad.is_error and "YYYY-MM-DD" in bad.text
        bad = await session.call("search_emails", {"keywords": []})
        assert bad.is_error and "keywords" in bad.text
        # another inbox's email is not in this one
        other = inboxes[1].emails[0].id
        assert (await session.call("read_email", {"message_id": other})).is_error
        bad = await session.call("return_final_answer", {"answer": "x", "sources": [other, email.id]})
        assert bad.is_error and other in bad.text and email.id not in bad.text.split("sources:")[1]
        ok = await session.call("return_final_answer", {"answer": "x", "sources": [email.id]})
        assert not ok.is_error


async def test_unknown_inbox_fails_to_start_with_the_inboxes_it_has(db):
    with pytest.raises(art_mcp.ServerStartError, match="inbox-1000"):
        async with art_mcp.connect(server_params(db, "inbox-42")):
            pass


def test_database_is_opened_read_only(db, inboxes):
    server_module.open_inbox(str(db), inboxes[0].id)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            server_module._state["db"].execute("DELETE FROM emails")
    finally:
        server_module._state.pop("db").close()


async def test_teacher_reaches_every_known_answer_through_the_server(db, inboxes):
    records = await teach_inboxes(db, inboxes)
    assert len(records) == sum(len(i.questions) for i in inboxes)
    for record in records:
        art.validate_sft_record(record)
        assert record["metadata"]["reward"] >= 1.0
        last = record["messages"][-1]
        assert (
            last["role"] == "assistant" and last["tool_calls"][0]["function"]["name"] == "return_final_answer"
        )


def replay(record):
    """A model that replays a teacher record: its k-th reply is the record's k-th assistant turn."""
    turns = [m for m in record["messages"] if m["role"] == "assistant"]

    def handler(body):
        k = sum(m["role"] == "assistant" for m in body["messages"])
        return {"content": turns[k]["content"], "tool_calls": turns[k]["tool_calls"]}

    return handler


async def test_rollout_scores_a_teacher_like_agent_and_records_its_tool_calls(db, inboxes):
    inbox = inboxes[0]
    q = next(q for q in inbox.questions if q.kind == "amount")
    async with InboxServers(db) as servers, servers.session(inbox.id) as session:
        record = await teach(session, q, inbox.owner.name)
        with ScriptedOpenAI(replay(record)) as fake:
            model = art.Model(name="teacher", inference_base_url=fake.url, inference_api_key="x")
            traj = await rollout(model, session, q, inbox.owner.name)
    assert traj.reward == pytest.approx(record["metadata"]["reward"]) and traj.metrics["correct"] == 1.0
    assert traj.metadata["answer"] == spoken(q) and traj.metadata["sources"] == list(q.sources)
    assert [m["role"] for m in traj.messages()] == [m["role"] for m in record["messages"]][:-1] + [
        "assistant",
        "tool",
    ]
    assert len(traj.metadata["mcp_calls"]) == len(q.plan) + len(q.sources) + 1


FORMAT_ERRORS = [
    {"content": "The total is 1046.88"},  # no tool call
    {"tool_calls": [{"name": "send_email", "arguments": {}}]},  # no such tool
    {"tool_calls": [{"name": "search_emails", "arguments": "{keywords: Lisbon"}]},  # not JSON
    {"tool_calls": [{"name": "return_final_answer", "arguments": {"answer": "1046.88", "sources": "x"}}]},
]


async def test_format_errors_end_the_rollout_with_the_lowest_reward(db, inboxes):
    inbox = inboxes[0]
    async with InboxServers(db) as servers, servers.session(inbox.id) as session:  # one process for all four
        for reply in FORMAT_ERRORS:
            with ScriptedOpenAI(reply) as fake:
                model = art.Model(name="m", inference_base_url=fake.url, inference_api_key="x")
                traj = await rollout(model, session, inbox.questions[0], inbox.owner.name)
            assert len(fake.requests) == 1, reply
            assert (
                traj.reward == -2.0 and traj.metrics["format_error"] == 1.0 and traj.metadata["format_error"]
            )


async def test_wrong_answer_after_reading_the_source_gets_partial_credit(db, inboxes):
    inbox = inboxes[0]
    q = next(q for q in inbox.questions if q.distractors and q.kind == "date")
    script = [
        {"tool_calls": [{"name": "search_emails", "arguments": {"keywords": list(q.plan[0])}}]},
        {"tool_calls": [{"name": "read_email", "arguments": json.dumps({"message_id": q.sources[0]})}]},
        {
            "tool_calls": [
                {"name": "return_final_answer", "arguments": {"answer": q.distractors[0], "sources": []}}
            ]
        },
    ]
    async with InboxServers(db, isolation="per_rollout") as servers, servers.session(inbox.id) as session:
        with ScriptedOpenAI(script) as fake:
            traj = await rollout(art.Model(name="m", inference_base_url=fake.url, inference_api_key="x"),
                                 session, q, inbox.owner.name)  # fmt: skip
    assert traj.reward == pytest.approx(-1.0 + 0.1 + 0.1) and traj.metrics["answered"] == 1.0


def test_dataset_questions_all_name_sources_in_their_own_inbox():
    train, heldout = dataset(2, 1)
    for inbox in [*train, *heldout]:
        ids = {e.id for e in inbox.emails}
        assert all(set(q.sources) <= ids and q.inbox_id == inbox.id for q in inbox.questions)


def test_server_params_make_the_database_path_absolute(tmp_path, monkeypatch):
    # the server process need not start in the caller's working directory (a relative --output broke)
    monkeypatch.chdir(tmp_path)
    args = server_params("run/inboxes.sqlite", "inbox-1").args
    assert args[args.index("--db") + 1] == str(tmp_path / "run" / "inboxes.sqlite")
