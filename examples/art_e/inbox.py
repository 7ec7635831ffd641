"""A deterministic generator of email inboxes, with questions whose answers and sources are known.

One seed gives one inbox: its owner, a dozen colleagues, outside contacts, a few hundred emails over
the first half of 2025 (threads with replies, attachments named in the text, newsletters and
notifications as noise), and the questions about it. Facts are spread over several messages: a
meeting is proposed, moved and confirmed in one thread; a flight's seat is changed in an email that
names only the booking code; a trip is reimbursed in parts. Every question records the ids of the
emails its answer comes from, the values a careless reader would give instead (`distractors`), and
the searches a careful agent would run (`plan`, used by the scripted teacher).

Train and held-out inboxes come from disjoint seed ranges, so an agent cannot memorise one inbox.

Example:
    inbox = generate_inbox(7)
    write_db([inbox], "inboxes.sqlite")
    train, heldout = dataset(train_inboxes=8, heldout_inboxes=4)
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "Email",
    "Inbox",
    "Question",
    "dataset",
    "generate_inbox",
    "inbox_seeds",
    "write_db",
]

AnswerKind = Literal["text", "date", "amount"]

TRAIN_SEEDS = 1000  # train inboxes use seeds 1000, 1001, ...
DEV_SEEDS = 5000  # dev inboxes (choosing a recipe) use seeds 5000, 5001, ...
HELDOUT_SEEDS = 9000  # held-out inboxes use seeds 9000, 9001, ...
YEAR = 2025

FIRST = (
    "Alice Brian Chloe Daniel Elena Farid Grace Hiro Imani Jonas Keira Liam Maya Nikolai Olivia Priya "
    "Quentin Rosa Samir Tessa Umar Vera Wesley Ximena Yusuf Zoe Aaron Bianca Carlos Dmitri Esther Felix "
    "Gwen Hassan Ingrid Jamal Kenji Lucia Marco Nadia"
).split()
LAST = (
    "Abbott Bergstrom Castillo Dubois Eriksen Fontaine Gallagher Haddad Iwasaki Jensen Kowalski Lindqvist "
    "Moreau Nakamura Okafor Petrov Quinlan Rahman Sandoval Thornton Ueda Vasquez Whitaker Xu Yilmaz Zeller "
    "Achebe Brennan Costa Delacroix"
).split()
COMPANIES = (
    ("Northwind Labs", "northwind.example"),
    ("Bluefin Analytics", "bluefin.example"),
    ("Copperleaf Systems", "copperleaf.example"),
    ("Driftwood Media", "driftwood.example"),
    ("Ember & Oak", "emberoak.example"),
    ("Fjord Robotics", "fjord.example"),
)
VENDORS = (
    ("Papercraft Supplies", "papercraft.example", ("printer paper", "standing desks", "whiteboard markers")),
    (
        "Voltline Electronics",
        "voltline.example",
        ("USB-C docks", "27-inch monitors", "noise-cancelling headsets"),
    ),
    ("Greenleaf Catering", "greenleaf.example", ("lunch platters", "breakfast boxes", "coffee urns")),
    ("Ironclad Furniture", "ironclad.example", ("ergonomic chairs", "conference tables", "filing cabinets")),
    (
        "Brightpath Software",
        "brightpath.example",
        ("design tool licences", "CI runner packs", "log storage plans"),
    ),
)
PROJECTS = (
    "Aurora Basalt Cobalt Dynamo Everest Falcon Granite Helix Indigo Juniper Kestrel Lumen Meridian Nimbus "
    "Onyx Pegasus Quartz Redwood Sierra Tundra Umbra Vortex Willow Zephyr Atlas Beacon Cascade Delta Ember Fathom"
).split()
ROOMS = ("Room 4B", "the Birch room", "the Cedar room", "Room 2A", "the Harbor room", "Room 6C", "the Atrium")
CITIES = ("Lisbon", "Denver", "Osaka", "Toronto", "Nairobi", "Berlin", "Austin", "Melbourne", "Oslo", "Seoul")
AIRLINES = ("SkyBridge Air", "Northstar Airways", "Coastal Jet")
DOC_KINDS = (
    ("budget", "xlsx", "the budget spreadsheet"),
    ("roadmap", "pptx", "the roadmap slides"),
    ("contract", "pdf", "the contract draft"),
    ("floorplan", "pdf", "the floor plan"),
    ("survey_results", "csv", "the survey results"),
)


@dataclass(frozen=True)
class Person:
    name: str
    address: str


@dataclass(frozen=True)
class Email:
    id: str
    thread_id: str
    date: str  # ISO timestamp, minutes resolution
    sender: Person
    to: tuple[Person, ...]
    subject: str
    body: str
    cc: tuple[Person, ...] = ()
    attachments: tuple[str, ...] = ()

    def text(self) -> str:
        """Everything a reader sees in the email (headers, body, attachment names)."""
        attached = f"\nAttachments: {', '.join(self.attachments)}" if self.attachments else ""
        return f"From: {self.sender.name} <{self.sender.address}>\nSubject: {self.subject}\n{self.body}{attached}"


@dataclass(frozen=True)
class Question:
    id: str
    inbox_id: str
    question: str
    answer: str  # for dates ISO "2025-03-14"; for amounts "1240.50"
    kind: AnswerKind
    sources: tuple[str, ...]  # the emails the answer is read from
    distractors: tuple[str, ...] = ()  # wrong values of the same kind found nearby
    plan: tuple[tuple[str, ...], ...] = ()  # keyword searches that find the sources, in order
    asked_on: str = f"{YEAR}-07-01"


@dataclass
class Inbox:
    id: str
    seed: int
    owner: Person
    emails: list[Email]
    questions: list[Question]

    def email(self, email_id: str) -> Email:
        for e in self.emails:
            if e.id == email_id:
                return e
        raise KeyError(f"no email {email_id!r} in inbox {self.id}")


@dataclass
class _Draft:
    """An email before ids are assigned (ids follow date order, so they are set at the end)."""

    key: str
    thread: str
    when: dt.datetime
    sender: Person
    to: tuple[Person, ...]
    subject: str
    body: str
    cc: tuple[Person, ...] = ()
    attachments: tuple[str, ...] = ()


@dataclass
class _QuestionDraft:
    question: str
    answer: str
    kind: AnswerKind
    source_keys: tuple[str, ...]
    distractors: tuple[str, ...] = ()
    plan: tuple[tuple[str, ...], ...] = ()


def day_phrase(d: dt.date) -> str:
    """How the emails write a date: 'Friday, March 14'."""
    return f"{d:%A}, {d:%B} {d.day}"


def weekday(d: dt.date) -> dt.date:
    """The date itself, or the Monday after it when it falls on a weekend."""
    return d + dt.timedelta(days=(7 - d.weekday()) % 7) if d.weekday() >= 5 else d


def money(x: float) -> str:
    return f"${x:,.2f}"


@dataclass
class _Builder:
    rng: random.Random
    owner: Person
    company: str
    domain: str
    colleagues: list[Person]
    drafts: list[_Draft] = field(default_factory=list)
    questions: list[_QuestionDraft] = field(default_factory=list)
    used: set[str] = field(default_factory=set)  # projects, cities... used once per inbox

    def pick(self, pool: Iterable[str]) -> str:
        choices = [p for p in pool if p not in self.used]
        value = self.rng.choice(choices)
        self.used.add(value)
        return value

    def day(self, lo: int = 5, hi: int = 170) -> dt.datetime:
        start = dt.datetime(YEAR, 1, 6, 8, 0)
        d = start + dt.timedelta(days=self.rng.randint(lo, hi))
        while d.weekday() >= 5:
            d += dt.timedelta(days=1)
        return d.replace(hour=self.rng.randint(8, 17), minute=self.rng.randrange(0, 60, 1))

    def later(self, when: dt.datetime, lo_h: int = 2, hi_h: int = 60) -> dt.datetime:
        return when + dt.timedelta(hours=self.rng.randint(lo_h, hi_h), minutes=self.rng.randint(0, 59))

    def mail(self, thread: str, when: dt.datetime, sender: Person, to: Iterable[Person], subject: str, body: str,
             cc: Iterable[Person] = (), attachments: Iterable[str] = ()) -> str:  # fmt: skip
        key = f"d{len(self.drafts)}"
        self.drafts.append(
            _Draft(key, thread, when, sender, tuple(to), subject, body, tuple(cc), tuple(attachments))
        )
        return key

    def ask(self, question: str, answer: str, kind: AnswerKind, sources: Iterable[str], *,
            distractors: Iterable[str] = (), plan: Iterable[Iterable[str]] = ()) -> None:  # fmt: skip
        self.questions.append(
            _QuestionDraft(
                question, answer, kind, tuple(sources), tuple(distractors), tuple(tuple(p) for p in plan)
            )
        )

    def someone(self, *exclude: Person) -> Person:
        return self.rng.choice([c for c in self.colleagues if c not in exclude])

    def sign(self, p: Person) -> str:
        return f"\n\n{self.rng.choice(['Thanks', 'Best', 'Cheers', 'Regards'])},\n{p.name.split()[0]}"

    # ----- scenarios: each writes a few emails and asks about them -----

    def meeting(self) -> None:
        project = self.pick(PROJECTS)
        host, mover = self.someone(), None
        mover = self.someone(host)
        room = self.rng.choice(ROOMS)
        t0 = self.day(0, 150)
        first = weekday(t0.date() + dt.timedelta(days=self.rng.randint(6, 12)))
        second = weekday(first + dt.timedelta(days=self.rng.randint(2, 6)))
        hour = self.rng.choice(["10:00", "11:30", "14:00", "15:30"])
        subject = f"{project} kickoff"
        thread = f"meeting-{project}"
        a = self.mail(thread, t0, host, [self.owner, mover], subject,
                      f"Hi both,\n\nLet's kick off Project {project} on {day_phrase(first)} at {hour} in {room}. "
                      f"I'll bring the draft scope; please skim the last quarter's notes beforehand.{self.sign(host)}")  # fmt: skip
        t1 = self.later(t0)
        b = self.mail(thread, t1, mover, [host, self.owner], f"Re: {subject}",
                      f"{day_phrase(first)} clashes with a customer visit on my side. Could we move it to "
                      f"{day_phrase(second)}, same time?{self.sign(mover)}")  # fmt: skip
        c = self.mail(thread, self.later(t1), host, [mover, self.owner], f"Re: {subject}",
                      f"Sure, {day_phrase(second)} works. Confirmed, same time and same room. "
                      f"I've updated the invite.{self.sign(host)}")  # fmt: skip
        self.ask(f"What date was the Project {project} kickoff that {host.name} organised finally scheduled for?", second.isoformat(), "date",
                 [b, c], distractors=[first.isoformat()], plan=[[project, "kickoff"]])  # fmt: skip
        self.ask(f"Where will the Project {project} kickoff that {host.name} organised take place?", room, "text", [a, c],
                 plan=[[project, "kickoff"]])  # fmt: skip

    def attachment(self) -> None:
        stem, ext, what = self.rng.choice(DOC_KINDS)
        project = self.pick(PROJECTS)
        author = self.someone()
        v = self.rng.randint(2, 4)
        old, new = f"{project.lower()}_{stem}_v{v}.{ext}", f"{project.lower()}_{stem}_v{v + 1}.{ext}"
        t0 = self.day(0, 150)
        thread = f"doc-{project}"
        subject = f"{project} {stem.replace('_', ' ')}"
        self.mail(thread, t0, author, [self.owner], subject,
                  f"Hi,\n\nFirst pass at {what} for {project} is attached ({old}). Numbers in section 2 "
                  f"are still rough.{self.sign(author)}", attachments=[old])  # fmt: skip
        b = self.mail(thread, self.later(t0, 20, 90), author, [self.owner], f"Re: {subject}",
                      f"Updated version attached as {new}: it folds in your comments and fixes the totals. "
                      f"Please use this one from now on.{self.sign(author)}", attachments=[new])  # fmt: skip
        self.ask(f"What is the file name of the latest version of {what} for {project} that {author.name} sent?",
                 new, "text", [b], distractors=[old], plan=[[project, stem.split('_')[0]]])  # fmt: skip

    def order(self) -> None:
        vendor, vdomain, items = self.rng.choice(VENDORS)
        item = self.pick(items)
        po = f"PO-{self.rng.randint(10000, 99999)}"
        qty = self.rng.randint(3, 40)
        total = round(qty * self.rng.uniform(12, 480), 2)
        rep = Person(f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}", f"orders@{vdomain}")
        t0 = self.day(0, 160)
        a = self.mail(f"order-{po}", t0, rep, [self.owner], f"Order confirmation {po}",
                      f"Hello {self.owner.name.split()[0]},\n\nThank you for your order with {vendor}. We have "
                      f"confirmed {qty} units of {item}, total {money(total)}, under purchase order {po}. "
                      f"Expected delivery is within ten business days.\n\n{rep.name}\n{vendor}")  # fmt: skip
        self.ask(f"What is the purchase order number for the {qty} {item} ordered from {vendor}?", po, "text", [a],
                 plan=[[vendor.split()[0], item.split()[-1]]])  # fmt: skip

    def expenses(self) -> None:
        city = self.pick(CITIES)
        finance = Person(f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}", f"finance@{self.domain}")
        parts = [("flights", self.rng.uniform(300, 900)), ("hotel", self.rng.uniform(200, 700))]
        if self.rng.random() < 0.5:
            parts.append(("meals and taxis", self.rng.uniform(40, 180)))
        parts = [(what, round(x, 2)) for what, x in parts]
        t = self.day(0, 140)
        keys = []
        for what, amount in parts:
            t = self.later(t, 24, 200)
            keys.append(self.mail(f"expense-{city}-{what}", t, finance, [self.owner],
                                  f"Reimbursement approved: {city} trip ({what})",
                                  f"Hi {self.owner.name.split()[0]},\n\nYour claim for {what} on the {city} trip "
                                  f"has been approved. {money(amount)} will be paid with your next salary.\n\n"
                                  f"{finance.name}\nFinance, {self.company}"))  # fmt: skip
        total = round(sum(a for _, a in parts), 2)
        self.ask(f"How much was {self.owner.name} reimbursed in total for the {city} trip?", f"{total:.2f}", "amount", keys,
                 plan=[[city, "reimbursement"]])  # fmt: skip

    def flight(self) -> None:
        city = self.pick(CITIES)
        airline = self.rng.choice(AIRLINES)
        code = "".join(self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
        row, row2 = self.rng.randint(5, 30), self.rng.randint(5, 30)
        seat, seat2 = f"{row}{self.rng.choice('ABCDEF')}", f"{row2}{self.rng.choice('ABCDEF')}"
        if seat2 == seat:
            seat2 = f"{row2 + 1}{seat2[-1]}"
        sender = Person(airline, f"bookings@{airline.split()[0].lower()}.example")
        t0 = self.day(0, 150)
        fly = (t0 + dt.timedelta(days=self.rng.randint(10, 30))).date()
        a = self.mail(f"flight-{code}", t0, sender, [self.owner], f"Your flight to {city}",
                      f"Dear {self.owner.name},\n\nYour flight to {city} on {day_phrase(fly)} is booked. "
                      f"Booking reference {code}, seat {seat}.\n\n{airline}")  # fmt: skip
        b = self.mail(f"flight-{code}", self.later(t0, 24, 150), sender, [self.owner], f"Change to booking {code}",
                      f"Dear {self.owner.name},\n\nDue to an aircraft change your seat on booking {code} is now "
                      f"{seat2}. Everything else is unchanged.\n\n{airline}")  # fmt: skip
        self.ask(f"What seat is {self.owner.name} assigned on the flight to {city}?", seat2, "text",
                 [a, b], distractors=[seat], plan=[["flight", city], [code]])  # fmt: skip

    def deadline(self) -> None:
        project = self.pick(PROJECTS)
        boss = self.someone()
        t0 = self.day(0, 150)
        due = weekday(t0.date() + dt.timedelta(days=self.rng.randint(7, 21)))
        a = self.mail(f"report-{project}", t0, boss, [self.owner, *self.rng.sample(self.colleagues, 2)],
                      f"{project} status report",
                      f"Team,\n\nThe {project} status report is due {day_phrase(due)}. Please send me your "
                      f"sections two days before so I can stitch them together.{self.sign(boss)}")  # fmt: skip
        self.ask(f"When is the {project} status report that {boss.name} asked for due?", due.isoformat(), "date", [a],
                 plan=[[project, "report"]])  # fmt: skip

    def handover(self) -> None:
        vendor, vdomain, _ = self.rng.choice(VENDORS)
        project = self.pick(PROJECTS)
        old = Person(f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}", "")
        new = Person(f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}", "")
        if new.name == old.name:
            new = Person(new.name + "-Reyes", "")
        new = Person(new.name, f"{new.name.split()[0].lower()}@{vdomain}")
        old = Person(old.name, f"{old.name.split()[0].lower()}@{vdomain}")
        t0 = self.day(0, 150)
        self.mail(f"account-{project}", t0, old, [self.owner], f"{project} account update",
                  f"Hi {self.owner.name.split()[0]},\n\nA quick note that I'm moving to a new team at {vendor} at "
                  f"the end of the month. A colleague will take over the {project} account; you'll hear from "
                  f"them soon.\n\n{old.name}")  # fmt: skip
        b = self.mail(f"account-{project}-intro", self.later(t0, 48, 200), new, [self.owner],
                      "Introduction: your new account manager",
                      f"Hello {self.owner.name.split()[0]},\n\nI'm {new.name}, and I'm now your contact at {vendor} "
                      f"for the {project} account, taking over from {old.name.split()[0]}. Reach me at "
                      f"{new.address}.\n\n{new.name}")  # fmt: skip
        self.ask(f"Who took over the {project} account at {vendor} from {old.name}?", new.name, "text", [b],
                 distractors=[old.name], plan=[[project, "account"]])  # fmt: skip

    # ----- noise -----

    def noise(self, n: int) -> None:
        kinds = [self._newsletter, self._lunch, self._ticket, self._notice, self._fyi]
        for _ in range(n):
            self.rng.choice(kinds)()

    def _newsletter(self) -> None:
        sender = Person(f"{self.company} Weekly", f"news@{self.domain}")
        topics = ["the new parking policy", "the spring hackathon", "our volunteering day", "the cafeteria menu",
                  "quarterly all-hands highlights", "security awareness month", "the new VPN client"]  # fmt: skip
        topic, other = self.rng.sample(topics, 2)
        n = self.rng.randint(1, 52)
        self.mail(f"news-{len(self.drafts)}", self.day(), sender, [self.owner], f"{self.company} Weekly #{n}",
                  f"This week: {topic}, plus an update on {other}. Read the full stories on the intranet. "
                  "Questions? Reply to this email.")  # fmt: skip

    def _lunch(self) -> None:
        a, b = self.someone(), self.someone()
        t = self.day()
        place = self.rng.choice(["the ramen place", "the Thai cafe", "the salad bar", "the food trucks"])
        thread = f"lunch-{len(self.drafts)}"
        subject = f"Lunch {t:%A}?"
        self.mail(thread, t, a, [self.owner, b], subject, f"Anyone up for {place} around noon?{self.sign(a)}")
        if self.rng.random() < 0.6:
            self.mail(thread, self.later(t, 1, 3), b, [a, self.owner], f"Re: {subject}",
                      f"I'm in. Let's meet in the lobby.{self.sign(b)}")  # fmt: skip

    def _ticket(self) -> None:
        key = f"OPS-{self.rng.randint(100, 999)}"
        who = self.someone()
        status = self.rng.choice(["In Progress", "Resolved", "Waiting for review", "Reopened"])
        self.mail(f"ticket-{key}-{len(self.drafts)}", self.day(), Person("Tracker", f"tracker@{self.domain}"),
                  [self.owner], f"[{key}] status changed to {status}",
                  f"{who.name} changed the status of {key} to {status}.\n\nView the ticket in the tracker.")  # fmt: skip

    def _notice(self) -> None:
        texts = [
            (
                "Your password expires soon",
                "Your password expires in 5 days. Change it from the account portal.",
            ),
            ("Scheduled maintenance this weekend", "The build servers will be offline on Saturday morning."),
            (
                "New login from a browser",
                "We noticed a new sign-in to your account. If this was you, ignore this.",
            ),
            (
                "Your expense report was submitted",
                "We received your report and will review it within a week.",
            ),
        ]
        subject, body = self.rng.choice(texts)
        self.mail(f"notice-{len(self.drafts)}", self.day(), Person("IT Service Desk", f"it@{self.domain}"),
                  [self.owner], subject, body)  # fmt: skip

    def _fyi(self) -> None:
        a = self.someone()
        topic = self.rng.choice(["an article on retrieval evaluation", "the conference schedule",
                                 "notes from the design review", "a podcast about remote work", "the hiring plan"])  # fmt: skip
        self.mail(f"fyi-{len(self.drafts)}", self.day(), a, [self.owner], f"FYI: {topic}",
                  f"Thought you'd find {topic} useful. No action needed.{self.sign(a)}")  # fmt: skip


SCENARIOS = {
    "meeting": 3,
    "attachment": 2,
    "order": 3,
    "expenses": 2,
    "flight": 2,
    "deadline": 2,
    "handover": 2,
}


def generate_inbox(seed: int, *, noise: int = 230) -> Inbox:
    """One inbox and its questions, the same for the same seed.

    Example:
        inbox = generate_inbox(1000)
        len(inbox.emails), inbox.questions[0].question
    """
    rng = random.Random(seed)
    company, domain = rng.choice(COMPANIES)
    names = [
        f"{first} {last}" for first, last in zip(rng.sample(FIRST, 14), rng.sample(LAST, 14), strict=True)
    ]
    people = [Person(n, f"{n.split()[0].lower()}.{n.split()[1].lower()}@{domain}") for n in names]
    b = _Builder(rng, people[0], company, domain, people[1:])
    for name, count in SCENARIOS.items():
        for _ in range(count):
            getattr(b, name)()
    b.noise(noise)
    inbox_id = f"inbox-{seed}"
    b.drafts.sort(key=lambda d: (d.when, d.key))
    ids: dict[str, str] = {}
    emails: list[Email] = []
    for d in b.drafts:
        while (eid := f"{rng.getrandbits(32):08x}") in ids.values():
            pass
        ids[d.key] = eid
        emails.append(Email(eid, d.thread, d.when.isoformat(timespec="minutes"), d.sender, d.to, d.subject,
                            d.body, d.cc, d.attachments))  # fmt: skip
    questions = [
        Question(
            f"{inbox_id}-q{i:02d}",
            inbox_id,
            q.question,
            q.answer,
            q.kind,
            tuple(ids[k] for k in q.source_keys),
            q.distractors,
            q.plan,
        )  # fmt: skip
        for i, q in enumerate(b.questions)
    ]
    return Inbox(inbox_id, seed, b.owner, emails, questions)


def inbox_seeds(split: Literal["train", "dev", "heldout"], n: int) -> list[int]:
    """Seeds of the first `n` inboxes of a split (the three ranges never meet)."""
    start = {"train": TRAIN_SEEDS, "dev": DEV_SEEDS, "heldout": HELDOUT_SEEDS}[split]
    if n > DEV_SEEDS - TRAIN_SEEDS:
        raise ValueError(f"at most {DEV_SEEDS - TRAIN_SEEDS} inboxes per split, got {n}")
    return list(range(start, start + n))


def dataset(
    train_inboxes: int = 8, heldout_inboxes: int = 4, split: Literal["dev", "heldout"] = "heldout"
) -> tuple[list[Inbox], list[Inbox]]:
    """Train and evaluation inboxes (`split`: "heldout", or "dev" to choose a recipe on). An
    evaluation question whose text also occurs in train is dropped."""
    train = [generate_inbox(s) for s in inbox_seeds("train", train_inboxes)]
    heldout = [generate_inbox(s) for s in inbox_seeds(split, heldout_inboxes)]
    seen = {q.question for inbox in train for q in inbox.questions}
    for inbox in heldout:
        inbox.questions = [q for q in inbox.questions if q.question not in seen]
    return train, heldout


SCHEMA = """
CREATE TABLE emails (
    id TEXT NOT NULL, inbox_id TEXT NOT NULL, thread_id TEXT NOT NULL, date TEXT NOT NULL,
    from_name TEXT NOT NULL, from_addr TEXT NOT NULL, to_addrs TEXT NOT NULL, cc_addrs TEXT NOT NULL,
    subject TEXT NOT NULL, body TEXT NOT NULL, attachments TEXT NOT NULL, PRIMARY KEY (inbox_id, id)
);
CREATE INDEX emails_inbox_date ON emails (inbox_id, date);
CREATE VIRTUAL TABLE emails_fts USING fts5(
    subject, body, from_name, attachments, content='emails', content_rowid='rowid'
);
CREATE TABLE questions (
    id TEXT PRIMARY KEY, inbox_id TEXT NOT NULL, question TEXT NOT NULL, answer TEXT NOT NULL,
    kind TEXT NOT NULL, sources TEXT NOT NULL, distractors TEXT NOT NULL, plan TEXT NOT NULL
);
"""


def _people(people: Iterable[Person]) -> str:
    return ", ".join(f"{p.name} <{p.address}>" for p in people)


def write_db(inboxes: Iterable[Inbox], path: str | Path) -> Path:
    """Write inboxes (emails with a full-text index, and their questions) to a new SQLite file."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; remove it or write to a new file")
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA)
        for inbox in inboxes:
            db.executemany(
                "INSERT INTO emails VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(e.id, inbox.id, e.thread_id, e.date, e.sender.name, e.sender.address, _people(e.to),
                  _people(e.cc), e.subject, e.body, ", ".join(e.attachments)) for e in inbox.emails],
            )  # fmt: skip
            db.executemany(
                "INSERT INTO questions VALUES (?,?,?,?,?,?,?,?)",
                [(q.id, q.inbox_id, q.question, q.answer, q.kind, json.dumps(q.sources),
                  json.dumps(q.distractors), json.dumps(q.plan)) for q in inbox.questions],
            )  # fmt: skip
        db.execute("INSERT INTO emails_fts (emails_fts) VALUES ('rebuild')")
        db.commit()
    finally:
        db.close()
    return path


def question_dict(q: Question) -> dict[str, object]:
    return asdict(q)
