"""How well does a RULER judge agree with ART-E's true reward? Kendall tau per group, mean and interval.

On ART-E the true reward is known, so a judge can be measured rather than trusted. Each group holds
six rollouts of one train question, built from the scripted teacher's real tool calls and results:
the teacher itself (correct, sources read), a correct answer without reading, a wrong answer after
reading, giving up after a search, a guess without searching, and a format error. Their true
rewards differ, so each group has a full ranking. RULER scores the group in one judge call; the
group's Kendall tau-b compares the two rankings (1: same order, 0: unrelated, -1: reversed).

    python -m examples.art_e.ruler_agreement --judge self                 # the served SmolLM2-135M judges
    python -m examples.art_e.ruler_agreement --judge openai/NAME --judge-api-base URL
    python -m examples.art_e.ruler_agreement --judge oracle               # the scripted oracle over HTTP

The oracle (`oracle_judge.py`) is no model: it re-scores what each shown transcript did with ART-E's
reward, so its tau (1 when all is right) checks RULER's prompt, ids, parsing and ordering.

A judge failure (unparseable answer twice) drops the group and is counted, never scored as 0. The
served judge (``--judge self``) decodes under the group's own JSON schema (RULER sends it to a judge
registered with an ART backend), so its answers are always usable and tau measures its ranking.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import datetime as dt
import json
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import art_core as art

from .inbox import Inbox, Question, dataset, write_db
from .reward import Outcome, score
from .rollout import EMAIL_ID, FINAL_ANSWER, InboxServers
from .teacher import MAX_TURNS, spoken, teach

logger = logging.getLogger("art_e.ruler")

VARIANTS = ("teacher", "no_read", "wrong_after_reading", "give_up", "guess", "format_error")


def wrong_value(q: Question, inbox: Inbox) -> str:
    """A plausible wrong answer: a distractor, else a nearby value, else another question's answer."""
    if q.distractors:
        return q.distractors[0]
    if q.kind == "amount":
        return f"{float(q.answer) + 10:.2f}"
    if q.kind == "date":
        return (dt.date.fromisoformat(q.answer) + dt.timedelta(days=1)).isoformat()
    others = [o.answer for o in inbox.questions if o.kind == "text" and o.answer != q.answer]
    return others[0]


def _final(n: int, answer: str, sources: list[str]) -> list[dict[str, Any]]:
    args = json.dumps({"answer": answer, "sources": sources})
    call = {"id": f"call_{n}", "type": "function", "function": {"name": FINAL_ANSWER, "arguments": args}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "name": FINAL_ANSWER, "content": "Answer recorded."},
    ]


def variant(record: dict[str, Any], q: Question, inbox: Inbox, kind: str) -> art.Trajectory:
    """One rollout of the group, with its true reward from ART-E's reward function."""
    msgs = copy.deepcopy(record["messages"][:-1])  # without the teacher's final call
    head, search = msgs[:2], msgs[2:4]
    found = set(EMAIL_ID.findall(search[1]["content"]))
    wrong = spoken(dataclasses.replace(q, answer=wrong_value(q, inbox)))  # written as the right one is
    if kind == "teacher":
        body, out = (
            msgs[2:] + _final(len(msgs), spoken(q), list(q.sources)),
            Outcome(spoken(q), list(q.sources)),
        )
        out.read = set(q.sources)
    elif kind == "no_read":
        body, out = search + _final(4, spoken(q), list(q.sources)), Outcome(spoken(q), list(q.sources))
    elif kind == "wrong_after_reading":
        body, out = msgs[2:] + _final(len(msgs), wrong, list(q.sources)), Outcome(wrong, list(q.sources))
        out.read = set(q.sources)
    elif kind == "give_up":
        body, out = search + _final(4, "I don't know", []), Outcome("I don't know", [])
    elif kind == "guess":
        body, out, found = _final(2, wrong, []), Outcome(wrong, []), set()
    else:
        body = [{"role": "assistant", "content": f"I think it is {wrong}."}]
        out, found = Outcome(None, [], format_error="a reply without a tool call"), set()
    out.found = found
    out.turns = sum(m["role"] == "assistant" for m in body)
    reward, parts = score(out, q, max_turns=MAX_TURNS)
    return art.Trajectory(messages=head + body, tools=record["tools"], reward=reward,
                          metrics=parts, metadata={"variant": kind, "question_id": q.id})  # fmt: skip


def bootstrap_ci(values: list[float], n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


async def measure(groups: list[art.TrajectoryGroup], judge: Any, litellm_params: dict[str, Any] | None,
                  on_group: Any = None, timeout: float = 120.0) -> dict[str, Any]:  # fmt: skip
    """Score each group with RULER and compare its ranking with the true one; ``on_group(figures)``
    gets the figures so far after every group (a run stopped early keeps them)."""
    import ruler

    stats = ruler.RulerStats()
    taus: list[float] = []
    flat = 0  # groups the judge scored all alike: no ranking, so no tau (counted, not hidden)
    out: dict[str, Any] = {}
    for n, g in enumerate(groups, 1):
        scored = await ruler.score_group(g, judge=judge, litellm_params=litellm_params, swallow_exceptions=True,
                                         stats=stats, max_attempts=2, retry_delay=0.1, timeout=timeout)  # fmt: skip
        if scored is not None:
            truth = [t.metrics["independent_reward"] for t in scored.trajectories]
            tau = ruler.kendall_tau(truth, [t.reward for t in scored.trajectories])
            if tau is not None:
                taus.append(tau)
            else:
                flat += 1
        out = {"groups": n, "scored": len(taus), "no_ranking": flat, "dropped": stats.groups_dropped,
               "drop_reasons": dict(stats.drop_reasons), "judge_calls": stats.judge_calls}  # fmt: skip
        if taus:
            out.update(tau_mean=statistics.fmean(taus), tau_ci=list(bootstrap_ci(taus)), taus=taus)
        logger.info("group %d/%d: %d scored, %d dropped, tau mean %s", n, len(groups), len(taus),
                    stats.groups_dropped, f"{out['tau_mean']:.3f}" if taus else "-")  # fmt: skip
        if on_group is not None:
            on_group(out)
    return out


async def build_groups(db: Path, inboxes: list[Inbox], n: int, seed: int) -> list[art.TrajectoryGroup]:
    rng = random.Random(seed)
    pairs = [(i, q) for i in inboxes for q in i.questions]
    rng.shuffle(pairs)
    groups = []
    async with InboxServers(db) as servers:
        for inbox, q in pairs[:n]:
            async with servers.session(inbox.id) as session:
                record = await teach(session, q, inbox.owner.name)
            trajs = [variant(record, q, inbox, k) for k in VARIANTS]
            rng.shuffle(trajs)  # the judge must not learn the order
            groups.append(art.TrajectoryGroup(trajs, metadata={"question_id": q.id}))
    return groups


async def main(args: argparse.Namespace) -> dict[str, Any]:
    run = Path(args.output or tempfile.mkdtemp(prefix="art-e-ruler-"))
    run.mkdir(parents=True, exist_ok=True)
    train, _ = dataset(args.inboxes, 0)
    db = run / "inboxes.sqlite"
    db.unlink(missing_ok=True)
    write_db(train, db)
    groups = await build_groups(db, train, args.groups, args.seed)
    t0 = time.perf_counter()
    backend = None
    servers = contextlib.ExitStack()
    judge: Any
    params: dict[str, Any]
    if args.judge == "oracle":  # served on loopback, reached through litellm as a paid judge is
        from .oracle_judge import oracle_server

        oracle = servers.enter_context(oracle_server(train))
        judge, params = "openai/oracle", {"api_base": oracle.url, "api_key": "none"}
        label = "oracle (scripted, over HTTP)"
    elif args.judge == "self":  # the served base model judges (no network needed)
        from art_train import LocalBackend

        backend = LocalBackend(path=run / "art")
        # a group of six email trajectories can pass 4,096 tokens; SmolLM2 has 8,192 positions
        judge = art.TrainableModel(name="judge", project="art-e-ruler", base_model=args.base_model,
                                   config=art.ModelConfig(max_seq_len=8192))  # fmt: skip
        await judge.register(backend)
        params = {}
        label = f"{args.base_model} (served)"
    else:
        judge, params, label = args.judge, {"api_base": args.judge_api_base, "api_key": "none"}, args.judge
    if args.judge_max_tokens:  # a small judge that never closes its JSON would run to its context's end
        params["max_tokens"] = args.judge_max_tokens
    partial = run / "ruler_agreement.json"

    def keep(figures: dict[str, Any]) -> None:
        partial.write_text(json.dumps({**figures, "judge": label, "seed": args.seed, "partial": True}, indent=2))

    try:
        out = await measure(groups, judge, params, on_group=keep, timeout=args.judge_timeout)
    finally:
        servers.close()
        if backend is not None:
            await backend.close()
    out.update(judge=label, seed=args.seed, wall_s=time.perf_counter() - t0, variants=list(VARIANTS),
               judge_max_tokens=args.judge_max_tokens, judge_timeout=args.judge_timeout)  # fmt: skip
    partial.write_text(json.dumps(out, indent=2))
    if args.record:
        from ..train_common import record

        record(
            Path(args.record),
            "art_e_ruler",
            {**out, "config": (f"self-{args.base_model}" if args.judge == "self" else args.judge).replace("/", "_"),
             "seed": args.seed},
        )
    print(json.dumps({k: v for k, v in out.items() if k != "taus"}, indent=2))  # noqa: T201 - the report
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judge", default="self",
                   help="'self' (serve --base-model as the judge), 'oracle' (the scripted oracle) or a litellm model")  # fmt: skip
    p.add_argument("--judge-api-base", help="the judge's OpenAI-compatible base URL")
    p.add_argument("--base-model", default="smollm2-135m", help="the served judge with --judge self")
    p.add_argument("--judge-max-tokens", type=int, default=1024,
                   help="cap on the judge's reply (0: none); six explanations of <= 300 characters fit in 1024")  # fmt: skip
    p.add_argument("--judge-timeout", type=float, default=120.0, help="seconds per judge call")
    p.add_argument("--groups", type=int, default=24)
    p.add_argument("--inboxes", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", help="run folder (default: a new temporary folder)")
    p.add_argument("--record", help="add the figures to this JSON file (benchmarks/results/examples.json)")
    return p.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(main(parse_args()))
