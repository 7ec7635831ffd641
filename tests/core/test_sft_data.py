"""art_core.sft_data: SFT JSONL checked on load (file and line named), masking, scheduled batches."""

from __future__ import annotations

import json
import math

import pytest

import art_core as art

TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
]


def call(name="lookup", arguments='{"q": "x"}', id="c1"):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}]}  # fmt: skip


def good(answer="42"):
    return {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            call(),
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "assistant", "content": answer},
        ],
        "tools": TOOLS,
    }


def write(tmp_path, records, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_loads_good_records_with_their_source(tmp_path):
    path = write(tmp_path, [good("1"), "", good("2")])
    data = art.load_sft_jsonl(path)
    assert [t.turns[-1]["content"] for t in data] == ["1", "2"]
    assert data[1].metadata["source"] == f"{path}:3" and data[0].tools == TOOLS
    assert all("weight" not in m for t in data for m in t.turns)


def test_mask_last_leaves_only_the_final_assistant_turn_as_a_target(tmp_path):
    data = art.load_sft_jsonl(write(tmp_path, [good()]), mask="last")
    weights = [(m["role"], m.get("weight")) for m in data[0].turns]
    assert weights == [
        ("system", None),
        ("user", None),
        ("assistant", 0),
        ("tool", None),
        ("assistant", None),
    ]
    with pytest.raises(ValueError, match="'all' or 'last'"):
        art.mask_turns(good()["messages"], "first")


def bad_records():
    missing_final = good()
    missing_final["messages"] = missing_final["messages"][:4]
    unknown_tool = good()
    unknown_tool["messages"][2] = call(name="delete_everything")
    broken_args = good()
    broken_args["messages"][2] = call(arguments='{"q": ')
    orphan = good()
    orphan["messages"][3]["tool_call_id"] = "c9"
    return [
        ('{"messages": [', "not valid JSON"),
        (missing_final, "must end with the assistant turn"),
        (unknown_tool, "unknown tool 'delete_everything'; the record's tools are: lookup"),
        (broken_args, "arguments of 'lookup' are not valid JSON"),
        (orphan, "tool result for 'c9'"),
        ({"messages": []}, "non-empty list"),
        ({"message": good()["messages"]}, "unknown keys ['message']"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "no valid role"),
    ]


@pytest.mark.parametrize(("record", "why"), bad_records())
def test_bad_records_are_rejected_naming_file_and_line(tmp_path, record, why):
    path = write(tmp_path, [good(), "", record, good()])
    with pytest.raises(art.SFTDataError) as info:
        art.load_sft_jsonl(path)
    assert str(info.value).startswith(f"{path}:3: ") and why in str(info.value)


def test_empty_file_and_write_roundtrip(tmp_path):
    with pytest.raises(art.SFTDataError, match="no records"):
        art.load_sft_jsonl(write(tmp_path, [""]))
    traj = art.Trajectory(**good(), metadata={"id": 7})
    n = art.write_sft_jsonl(tmp_path / "out" / "d.jsonl", [traj, good("x")])
    back = art.load_sft_jsonl(tmp_path / "out" / "d.jsonl")
    assert n == 2 and back[0].messages() == traj.messages() and back[0].metadata["id"] == 7
    with pytest.raises(art.SFTDataError, match="record 0: .*must end"):
        art.write_sft_jsonl(tmp_path / "e.jsonl", [{"messages": [{"role": "user", "content": "q"}]}])


def test_learning_rate_schedules_worked_by_hand():
    lr = art.learning_rate_at
    # 10 steps, 2 of warm-up: 0.5, 1.0 x peak; then 8 decay steps, progress (s - 2) / 8
    assert [lr(s, 10, 1.0, "constant", warmup_steps=2) for s in (0, 1, 5, 9)] == [0.5, 1.0, 1.0, 1.0]
    assert lr(6, 10, 1.0, "linear", warmup_steps=2) == pytest.approx(0.5)  # progress 4/8
    assert lr(6, 10, 1.0, "cosine", warmup_steps=2) == pytest.approx(0.5)  # cos(pi/2) = 0
    assert lr(4, 10, 1.0, "cosine", warmup_steps=2) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr(9, 10, 1.0, "linear", warmup_steps=2, min_lr=0.2) == pytest.approx(1.0 - 0.8 * 7 / 8)
    assert lr(9, 10, 1.0, "cosine") > 0
    with pytest.raises(ValueError, match=r"step must be in \[0, 10\)"):
        lr(10, 10, 1.0)


def test_iterate_sft_batches_epochs_schedule_and_resume():
    data = [art.Trajectory(**good(str(i))) for i in range(5)]
    batches = list(art.iterate_sft(data, batch_size=2, num_epochs=2, peak_lr=1.0, schedule="linear", seed=3))
    assert [len(b.trajectories) for b in batches] == [2, 2, 1, 2, 2, 1]
    assert [b.epoch for b in batches] == [0, 0, 0, 1, 1, 1] and {b.total_steps for b in batches} == {6}
    assert [b.learning_rate for b in batches] == pytest.approx([1 - s / 6 for s in range(6)])
    first_epoch = [t.turns[-1]["content"] for b in batches[:3] for t in b.trajectories]
    assert sorted(first_epoch) == ["0", "1", "2", "3", "4"] and first_epoch != ["0", "1", "2", "3", "4"]
    resumed = list(art.iterate_sft(data, batch_size=2, num_epochs=2, peak_lr=1.0, schedule="linear", seed=3,
                                   initial_step=4))  # fmt: skip
    assert [b.step for b in resumed] == [4, 5]
    assert [t.id for b in resumed for t in b.trajectories] == [
        t.id for b in batches[4:] for t in b.trajectories
    ]
