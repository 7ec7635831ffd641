"""RULER against ART-E's true reward: groups with a known ranking, a scripted judge over HTTP, Kendall tau."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

import ruler
from examples.art_e.inbox import generate_inbox, write_db
from examples.art_e.oracle_judge import oracle_server
from examples.art_e.ruler_agreement import VARIANTS, build_groups, measure
from examples.art_e.teacher import spoken
from tests.support.scripted_openai import ScriptedOpenAI

BLOCK = re.compile(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', re.S)


@pytest.fixture(scope="module")
def inbox():
    return generate_inbox(1002)


@pytest.fixture(scope="module")
def built(inbox, tmp_path_factory):
    """Four groups, built once through one real server process (tests get fresh copies)."""
    db = write_db([inbox], tmp_path_factory.mktemp("ruler") / "inboxes.sqlite")
    return asyncio.run(build_groups(db, [inbox], 4, seed=1))


@pytest.fixture
def groups(built):
    return [g.model_copy(deep=True) for g in built]


def perfect_judge(inbox, reverse=False):
    """Scores each shown rollout by what it did, knowing the right answers: the true order (or its reverse)."""

    def rule(text: str, prompt: str) -> float:
        q = next(q for q in inbox.questions if q.question in prompt)
        if "return_final_answer" not in text:
            return 0.0  # format error
        if "search_emails" not in text:
            return 0.1  # guess
        if "I don't know" in text:
            return 0.5
        final = text[text.rindex("return_final_answer") :]
        if json.dumps(spoken(q)) not in final:
            return 0.3  # wrong after reading
        return 0.9 if "read_email({" in text else 1.0  # read an email (not only a hint to)

    def handler(body):
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        scores = {i: rule(t, prompt) for i, t in BLOCK.findall(prompt)}
        if reverse:
            scores = {i: 1 - s for i, s in scores.items()}
        items = [{"trajectory_id": i, "explanation": "x", "score": s} for i, s in scores.items()]
        return {"content": json.dumps({"scores": items})}

    return handler


def test_groups_have_a_full_true_ranking(groups):
    for g in groups:
        by_variant = {t.metadata["variant"]: t.reward for t in g.trajectories}
        assert sorted(by_variant) == sorted(VARIANTS)
        order = sorted(by_variant, key=by_variant.get, reverse=True)
        # a correct answer from the search snippets alone takes fewer turns, so it earns a little more
        assert order == ["no_read", "teacher", "give_up", "wrong_after_reading", "guess", "format_error"]
    assert any([t.metadata["variant"] for t in g.trajectories] != list(VARIANTS) for g in groups)  # shuffled


@pytest.mark.heavy
async def test_tau_is_one_for_a_perfect_judge_minus_one_reversed_and_failures_are_dropped(
    built, groups, inbox
):
    params = lambda s: {"api_base": s.url, "api_key": "x"}  # noqa: E731
    seen: list[dict] = []
    with ScriptedOpenAI(perfect_judge(inbox)) as server:
        good = await measure(groups, "openai/judge", params(server), on_group=lambda f: seen.append(dict(f)))
    assert good["scored"] == 4 and good["tau_mean"] == pytest.approx(1.0) and good["judge_calls"] == 4
    assert [f["groups"] for f in seen] == [f["scored"] for f in seen] == [1, 2, 3, 4]  # figures kept after each group
    groups = [g.model_copy(deep=True) for g in built]
    with ScriptedOpenAI(perfect_judge(inbox, reverse=True)) as server:
        bad = await measure(groups, "openai/judge", params(server))
    assert bad["tau_mean"] == pytest.approx(-1.0) and bad["tau_ci"] == [pytest.approx(-1.0)] * 2
    with ScriptedOpenAI({"content": "no idea"}) as server:
        broken = await measure(groups, "openai/judge", params(server))
    assert broken["scored"] == 0 and broken["dropped"] == 4 and "tau_mean" not in broken

    def flat(body):  # a judge that ranks nothing: every rollout scored alike
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        items = [{"trajectory_id": i, "explanation": "x", "score": 0.5} for i, _ in BLOCK.findall(prompt)]
        return {"content": json.dumps({"scores": items})}

    groups = [g.model_copy(deep=True) for g in built]
    with ScriptedOpenAI(flat) as server:
        alike = await measure(groups, "openai/judge", params(server))
    assert alike["no_ranking"] == 4 and alike["scored"] == 0 and alike["dropped"] == 0 and "tau_mean" not in alike


@pytest.mark.heavy
async def test_the_oracle_over_http_ranks_as_the_true_reward_and_a_swapped_id_judge_does_not(built, groups, inbox):
    """The oracle sees only RULER's prompt; it re-scores each transcript with ART-E's reward."""
    with oracle_server([inbox]) as server:
        good = await measure(groups, "openai/oracle", {"api_base": server.url, "api_key": "x"})
    assert good["scored"] == 4 and good["dropped"] == 0 and good["tau_mean"] == pytest.approx(1.0)
    assert len(server.requests) == 4 and all(r["model"] == "oracle" for r in server.requests)
    for t in (t for g in groups for t in g.trajectories):  # each id's score came back to its trajectory
        assert t.logs[-1].endswith(f"reward {t.metrics['independent_reward']:+.2f}"), t.logs[-1]

    group = built[0].model_copy(deep=True)  # the same with response_format sent (RULER's JSON schema)
    with oracle_server([inbox]) as server:
        scored = await ruler.score_group(group, judge="openai/oracle", structured=True,
                                         litellm_params={"api_base": server.url, "api_key": "x"})  # fmt: skip
    assert "response_format" in server.requests[0]
    assert ruler.kendall_tau([t.metrics["independent_reward"] for t in scored.trajectories],
                             [t.reward for t in scored.trajectories]) == pytest.approx(1.0)  # fmt: skip

    def swap_ids(entries):  # an ordering bug: the scores read back onto the ids in reverse
        return [{**e, "trajectory_id": r["trajectory_id"]} for e, r in zip(entries, entries[::-1], strict=True)]

    groups = [g.model_copy(deep=True) for g in built]
    with oracle_server([inbox], change=swap_ids) as server:
        bad = await measure(groups, "openai/oracle", {"api_base": server.url, "api_key": "x"})
    assert bad["scored"] == 4 and max(bad["taus"]) < 0  # the measurement can fail
