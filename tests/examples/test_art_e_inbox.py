"""ART-E's inbox generator and questions: deterministic, realistic enough, and every answer is really
in the emails the question names as its sources."""

from __future__ import annotations

import re
import sqlite3

import pytest

from examples.art_e.inbox import dataset, generate_inbox, inbox_seeds, write_db
from examples.art_e.reward import amounts_in, grade, mentions


@pytest.fixture(scope="module")
def splits():
    return dataset(train_inboxes=8, heldout_inboxes=4)


def test_same_seed_same_inbox_other_seed_other_inbox():
    a, b, c = generate_inbox(1000), generate_inbox(1000), generate_inbox(1001)
    assert a == b
    assert a.owner != c.owner and {e.id for e in a.emails}.isdisjoint({e.id for e in c.emails})


def test_inbox_looks_like_an_inbox():
    inbox = generate_inbox(1003)
    assert 200 <= len(inbox.emails) <= 400
    assert len({e.id for e in inbox.emails}) == len(inbox.emails)
    dates = [e.date for e in inbox.emails]
    assert dates == sorted(dates) and dates[0] >= "2025-01-01" and dates[-1] < "2025-08-01"
    threads: dict[str, int] = {}
    for e in inbox.emails:
        threads[e.thread_id] = threads.get(e.thread_id, 0) + 1
    assert sum(n >= 3 for n in threads.values()) >= 3  # real threads with replies
    assert len({e.sender.address for e in inbox.emails}) >= 10
    with_files = [e for e in inbox.emails if e.attachments]
    assert with_files and all(
        name in e.body for e in with_files for name in e.attachments
    )  # named in the text


def test_answers_are_derivable_from_their_sources(splits):
    train, heldout = splits
    kinds = set()
    for inbox in [*train, *heldout]:
        assert len(inbox.questions) >= 15
        for q in inbox.questions:
            kinds.add(q.kind)
            sources = [inbox.email(s) for s in q.sources]  # KeyError if a source is not in this inbox
            text = "\n".join(e.text() for e in sources)
            if q.kind == "amount":  # a total: the amounts of the sources add up to it
                parts = [amounts_in(e.body.split("$", 1)[1])[0] for e in sources]
                assert round(sum(parts), 2) == pytest.approx(float(q.answer)), q
            else:
                assert mentions(text, q.answer, q.kind), q
            assert grade(q.answer, q) == "correct", q
            for d in q.distractors:  # a careless reader's value is somewhere in the inbox, and graded wrong
                assert any(mentions(e.text(), d, q.kind) for e in inbox.emails), q
                assert grade(d, q) == "wrong", q
    assert kinds == {"text", "date", "amount"}


def test_facts_are_spread_over_several_messages(splits):
    train, _ = splits
    inbox = train[0]
    spread = [q for q in inbox.questions if len(q.sources) >= 2]
    assert len(spread) >= 6
    seat = next(q for q in inbox.questions if q.question.startswith("What seat"))
    first, change = (inbox.email(s) for s in seat.sources)
    city = re.search(r"flight to (\w+)", seat.question).group(1)
    # the email with the new seat never names the city: only the booking code links the two
    assert city in first.body and city not in change.text() and mentions(change.body, seat.answer, "text")
    meeting = next(q for q in inbox.questions if q.question.startswith("What date"))
    assert meeting.distractors and mentions(
        inbox.email(meeting.sources[0]).body, meeting.distractors[0], "date"
    )


def test_splits_share_no_inbox_and_no_question(splits):
    train, heldout = splits
    seeds = {split: set(inbox_seeds(split, 4000)) for split in ("train", "dev", "heldout")}
    assert seeds["train"].isdisjoint(seeds["dev"]) and seeds["dev"].isdisjoint(seeds["heldout"])
    assert seeds["train"].isdisjoint(seeds["heldout"])
    with pytest.raises(ValueError, match="at most 4000"):
        inbox_seeds("dev", 4001)
    assert {i.id for i in train}.isdisjoint({i.id for i in heldout})
    train_q = [q for i in train for q in i.questions]
    held_q = [q for i in heldout for q in i.questions]
    assert len(train_q) >= 120 and len(held_q) >= 60
    assert {q.id for q in train_q}.isdisjoint({q.id for q in held_q})
    assert {q.question for q in train_q}.isdisjoint({q.question for q in held_q})
    assert all(q.inbox_id in {i.id for i in heldout} for q in held_q)


def test_write_db_indexes_the_text_and_keeps_the_questions(tmp_path):
    inboxes = [generate_inbox(1000), generate_inbox(1001)]
    db = write_db(inboxes, tmp_path / "x.sqlite")
    with pytest.raises(FileExistsError):
        write_db(inboxes, db)
    con = sqlite3.connect(db)
    q = inboxes[1].questions[0]
    rows = con.execute(
        "SELECT e.id FROM emails_fts JOIN emails e ON e.rowid = emails_fts.rowid "
        "WHERE emails_fts MATCH ? AND e.inbox_id = ?", (" AND ".join(q.plan[0]), q.inbox_id)
    ).fetchall()  # fmt: skip
    assert set(q.sources) <= {r[0] for r in rows}
    assert con.execute("SELECT count(*) FROM emails").fetchone()[0] == sum(len(i.emails) for i in inboxes)
    assert con.execute("SELECT answer FROM questions WHERE id = ?", (q.id,)).fetchone()[0] == q.answer
