"""Judge prompt tokens: RULER's shared-prefix prompt versus sending every trajectory whole.

Groups of 8 agent trajectories on the same task share a long system prompt (60 policy
rules) and a tool list (12 tools), about 4.7k tokens together, then diverge (different searches, different tool outputs, different answers; tool outputs of a few
hundred to several thousand characters, cut at RULER's default budget in both arms). For each
group we build the judge's messages both ways and count tokens with litellm's tokenizer for
`gpt-4.1-mini` (o200k). Then every group is scored for real with `ruler.score_group` against a
local OpenAI-compatible judge on loopback (litellm doing the calls), counting calls per group.

Reported (same run): median over groups of dedup_tokens / naive_tokens as `dedup_vs_naive_tokens`
(target <= 0.5), and `judge_calls_per_group` (target exactly 1 on the happy path). A second
scenario with a short prompt (10 rules, 6 tools) is reported under `scenarios` to show how the
gain depends on how much of a trajectory is shared.

Run: .venv/bin/python benchmarks/ruler_tokens.py [--groups 20]   (`--smoke`: 2 groups, to --out or a temp file)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

import art_core as art  # noqa: E402
import ruler  # noqa: E402
from ruler.prompt import Item, build_naive_prompt, build_prompt  # noqa: E402
from tests.ruler.conftest import answer, shown  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAI  # noqa: E402

TOKENIZER_MODEL = "gpt-4.1-mini"
GROUP_SIZE = 8

TOPICS = [
    "orders",
    "refunds",
    "shipping",
    "returns",
    "accounts",
    "payments",
    "gift cards",
    "privacy",
    "pre-orders",
    "e-books",
    "damaged items",
    "fraud",
    "vouchers",
    "invoices",
    "subscriptions",
]


def policy(n_rules: int) -> str:
    """A support agent's system prompt: an intro and numbered policy rules (~45 tokens each)."""
    rules = [
        f"{k + 1}. For {TOPICS[k % len(TOPICS)]}: look the order up before you answer, quote the exact status the "
        f"tool returns, never promise dates the tool does not give, and if the customer is unhappy after "
        f"{k % 3 + 2} replies, offer to escalate to a human colleague."
        for k in range(n_rules)
    ]
    return (
        "You are the customer support agent of an online bookshop. Be brief, polite and exact. "
        "Follow these rules:\n" + "\n".join(rules)
    )


TOOL_NAMES = [
    "lookup_order",
    "search_orders",
    "issue_refund",
    "track_shipment",
    "update_address",
    "escalate",
    "cancel_order",
    "resend_invoice",
    "apply_voucher",
    "check_stock",
    "open_return",
    "close_ticket",
]


def tools(n: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name.replace('_', ' ').capitalize()} for the current customer. Returns a JSON "
                "document describing the result, or an error message explaining what went wrong.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string", "description": "The order number, e.g. BK-12345."},
                        "reason": {"type": "string", "description": "Why, in the customer's words."},
                        "amount_eur": {"type": "number", "description": "Amount in euros, for refunds."},
                    },
                    "required": ["order_id"],
                },
            },
        }
        for name in TOOL_NAMES[:n]
    ]


# name: (policy rules, tools); "agent" is the headline workload, "short_prompt" shows where the gain comes from
SCENARIOS = {"agent": (60, 12), "short_prompt": (10, 6)}


def tool_output(rng: random.Random, order: str) -> str:
    lines = [
        json.dumps(
            {
                "order_id": order,
                "item": f"book {rng.randint(1, 999)}",
                "status": rng.choice(["shipped", "late", "lost"]),
            }
        )
        for _ in range(rng.choice([3, 10, 40, 120]))
    ]
    return "\n".join(lines)


def trajectory(rng: random.Random, task: int, system: str, tool_list: list[dict[str, Any]]) -> art.Trajectory:
    order = f"BK-{10000 + task}"
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": f"Hi, my order {order} never arrived and I want my money back. Task {task}.",
        },
    ]
    for k in range(rng.randint(1, 4)):
        name = rng.choice(tool_list)["function"]["name"]
        call_id = f"call_{task}_{k}_{rng.randint(0, 10**6)}"
        args = {"order_id": order, "reason": rng.choice(["not arrived", "late", "damaged"])}
        msgs.append(
            {
                "role": "assistant",
                "content": rng.choice([None, "Let me check that for you."]),
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": call_id, "content": tool_output(rng, order)})
    msgs.append(
        {
            "role": "assistant",
            "content": rng.choice(["Refund issued: 23.90 EUR.", "Your parcel is late.", "Escalated."]),
        }
    )
    return art.Trajectory(messages=msgs, tools=tool_list)


def count(messages: list[dict[str, Any]]) -> int:
    return litellm.token_counter(model=TOKENIZER_MODEL, messages=messages)


def judge(body: dict[str, Any]) -> dict[str, Any]:
    return {"content": answer({i: round(1 - int(i) / 10, 2) for i in shown(body)})}


def token_ratios(groups: list[art.TrajectoryGroup]) -> dict[str, Any]:
    dedup, naive = [], []
    for g in groups:
        items = [Item(t.messages(), t.tools) for t in g.trajectories]
        dedup.append(count(build_prompt(items).messages))
        naive.append(count(build_naive_prompt(items)))
    ratios = [d / n for d, n in zip(dedup, naive, strict=True)]
    return {
        "dedup_vs_naive_tokens": round(statistics.median(ratios), 4),
        "dedup_vs_naive_tokens_min": round(min(ratios), 4),
        "dedup_vs_naive_tokens_max": round(max(ratios), 4),
        "dedup_tokens_median": statistics.median(dedup),
        "naive_tokens_median": statistics.median(naive),
        "shared_context_tokens": count(
            [{"role": "user", "content": g.trajectories[0].messages()[0]["content"]}]
        )
        + count([{"role": "user", "content": json.dumps(g.trajectories[0].tools)}]),
    }


async def main(n_groups: int) -> dict[str, Any]:
    rng = random.Random(0)
    groups_by: dict[str, list[art.TrajectoryGroup]] = {}
    for name, (rules, n_tools) in SCENARIOS.items():
        system, tool_list = policy(rules), tools(n_tools)
        groups_by[name] = [
            art.TrajectoryGroup([trajectory(rng, t, system, tool_list) for _ in range(GROUP_SIZE)])
            for t in range(n_groups)
        ]
    scenarios = {name: token_ratios(gs) for name, gs in groups_by.items()}

    groups = groups_by["agent"]
    stats = ruler.RulerStats()
    t0 = time.perf_counter()
    with ScriptedOpenAI(judge) as server:
        for g in groups:
            await ruler.score_group(
                g,
                judge="openai/scripted-judge",
                litellm_params={"api_base": server.url, "api_key": "x"},
                stats=stats,
            )
        sent = [count(r["messages"]) for r in server.requests]
    wall = time.perf_counter() - t0
    calls = [g.metrics["ruler_judge_calls"] for g in groups]
    return {
        "groups": n_groups,
        "group_size": GROUP_SIZE,
        "tokenizer": TOKENIZER_MODEL,
        "dedup_vs_naive_tokens": scenarios["agent"]["dedup_vs_naive_tokens"],
        "judge_calls_per_group": statistics.median(calls),
        "judge_calls_per_group_max": max(calls),
        "sent_tokens_median": statistics.median(sent),  # what the judge really received
        "groups_scored": stats.groups_scored,
        "groups_dropped": stats.groups_dropped,
        "scoring_wall_s": round(wall, 3),
        "scenarios": scenarios,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}",
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="2 groups; to --out or a temp file")
    parser.add_argument("--out", type=Path, default=None, help="results file (default results/ruler_tokens.json)")
    args = parser.parse_args()
    out = args.out or ROOT / "benchmarks" / "results" / "ruler_tokens.json"
    if args.smoke:
        from _smoke import smoke_out

        args.groups, out = 2, smoke_out(args.out, "ruler_tokens.json")
    result = asyncio.run(main(args.groups))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
