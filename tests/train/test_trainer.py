"""The Trainer on a tiny random model: tokenizing, learning, checkpoints, SFT."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import art_core as art
from art_train.trainer import TokenizeStats, Trainer, tokenize_trajectory


@pytest.fixture(scope="module")
def trainer(tiny_model_path, tmp_path_factory) -> Trainer:  # noqa: ANN001
    model = art.TrainableModel(name="tiny", project="t", base_model=str(tiny_model_path))
    return Trainer(model, art.RunDir("t", "tiny", root=tmp_path_factory.mktemp("art")), device="cpu")


def _answer(trainer: Trainer, prompt: str, text: str, reward: float) -> art.Trajectory:
    tok = trainer.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    traj = art.Trajectory(messages=[{"role": "user", "content": prompt}], reward=reward)
    traj.turns.append(art.assistant_turn(text, token_ids=ids, logprobs=[-1.5] * len(ids)))
    return traj


def _render_ids(trainer: Trainer, messages: list[dict], generation_prompt: bool = False) -> list[int]:
    text = trainer.tokenizer.apply_chat_template(
        messages, chat_template=trainer.chat_template, tokenize=False, add_generation_prompt=generation_prompt
    )
    return trainer.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_sampled_ids_are_spliced_exactly(trainer: Trainer) -> None:
    tok = trainer.tokenizer
    odd = [tok.convert_tokens_to_ids(c) for c in "yes"] + [tok.eos_token_id]  # not how "yes" re-tokenizes
    assert odd[:3] != tok("yes", add_special_tokens=False)["input_ids"]
    traj = art.Trajectory(messages=[{"role": "user", "content": "q"}])
    traj.turns.append(art.assistant_turn("yes", token_ids=odd, logprobs=[-0.1, -0.2, -0.3, -0.4]))
    stats = TokenizeStats()
    (seq,) = tokenize_trajectory(traj, tok, trainer.chat_template, stats=stats)
    trained = [i for i, m in zip(seq.token_ids, seq.mask, strict=True) if m]
    assert trained == odd
    assert [lp for lp, m in zip(seq.sampler_logprobs, seq.mask, strict=True) if m] == [-0.1, -0.2, -0.3, -0.4]
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "q"}],
        chat_template=trainer.chat_template,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert tok.decode(seq.token_ids[: seq.mask.index(True)]) == prompt
    assert stats.metrics() == {"tokenize/spliced_turns": 1}


def test_tool_calls_context_and_additional_histories(trainer: Trainer) -> None:
    tok = trainer.tokenizer
    tools = [{"type": "function", "function": {"name": "search", "description": "d", "parameters": {}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "paris"}'}}
    traj = art.Trajectory(
        messages=[
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": None, "tool_calls": [call]},  # context: no sample
            {"role": "tool", "tool_call_id": "c1", "content": "result 42"},
        ],
        tools=tools,
        additional_histories=[art.History(messages=[{"role": "user", "content": "sub"}])],
    )
    ids = tok("done", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    traj.turns.append(art.assistant_turn("done", token_ids=ids))
    sub = art.assistant_turn("sub answer", token_ids=tok("sub answer", add_special_tokens=False)["input_ids"])
    traj.additional_histories[0].turns.append(sub)
    stats = TokenizeStats()
    main, extra = tokenize_trajectory(traj, tok, trainer.chat_template, stats=stats)
    text = tok.decode(main.token_ids)
    assert (
        '"name": "search"' in text and '{"q": "paris"}' in text and "result 42" in text and "# Tools" in text
    )
    assert [i for i, m in zip(main.token_ids, main.mask, strict=True) if m] == ids
    assert tok.decode([i for i, m in zip(extra.token_ids, extra.mask, strict=True) if m]) == "sub answer"
    assert stats.counts["spliced_turns"] == 2 and stats.counts["unsampled_context_turns"] == 1


def _hand_built(prompt: str, answer: str, reward: float = 0.0) -> art.Trajectory:
    """A history whose assistant turn the policy never sampled (a teacher's, a hand-built chat model's)."""
    return art.Trajectory(messages=[{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
                          reward=reward)


def test_unsampled_turns_are_context_by_default(trainer: Trainer) -> None:
    # a history with no sampled turn at all used to be re-tokenized and trained: text the policy never produced
    stats = TokenizeStats()
    assert tokenize_trajectory(_hand_built("q", "an answer nobody sampled"), trainer.tokenizer,
                               trainer.chat_template, stats=stats) == []
    assert stats.metrics() == {"tokenize/trajectories_without_trained_tokens": 1,
                               "tokenize/unsampled_context_turns": 1}
    stats = TokenizeStats()
    (seq,) = tokenize_trajectory(_hand_built("q", "asked for"), trainer.tokenizer, trainer.chat_template,
                                 stats=stats, train_unsampled=True)
    assert trainer.tokenizer.decode([i for i, m in zip(seq.token_ids, seq.mask, strict=True) if m]) == (
        "asked for<|im_end|>")
    assert stats.metrics() == {"tokenize/retokenized_turns": 1}


def test_grpo_step_trains_unsampled_turns_only_when_asked(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    model = art.TrainableModel(name="hand", project="t", base_model=str(tiny_model_path))
    trainer = Trainer(model, art.RunDir("t", "hand", root=tmp_path), device="cpu")
    group = art.TrajectoryGroup([_hand_built("p", "yes", 1.0), _hand_built("p", "no", 0.0)])
    plain = trainer.train([group], art.TrainConfig(learning_rate=1e-3)).metrics
    assert plain["trained_tokens"] == 0 and plain["optimizer_steps"] == 0
    assert plain["tokenize/unsampled_context_turns"] == 2
    assert plain["tokenize/trajectories_without_trained_tokens"] == 2
    asked = trainer.train([group], art.TrainConfig(learning_rate=1e-3, train_unsampled_turns=True)).metrics
    assert asked["tokenize/retokenized_turns"] == 2 and asked["trained_tokens"] == 4  # "yes", "no", 2 x <|im_end|>
    assert asked["optimizer_steps"] == 1


def test_weight_zero_turns_are_context(trainer: Trainer, tmp_path) -> None:  # noqa: ANN001
    record = {"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "early answer"},
                           {"role": "user", "content": "second"}, {"role": "assistant", "content": "final answer"}]}
    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps(record) + "\n")
    tok = trainer.tokenizer
    trained = {}
    for mask in ("all", "last"):
        (traj,) = art.load_sft_jsonl(path, mask=mask)
        stats = TokenizeStats()
        (seq,) = tokenize_trajectory(traj, tok, trainer.chat_template, stats=stats, train_unsampled=True)
        trained[mask] = tok.decode([i for i, m in zip(seq.token_ids, seq.mask, strict=True) if m])
        assert "early answer" in tok.decode(seq.token_ids)  # still in the context either way
    assert trained["all"] == "early answer<|im_end|>final answer<|im_end|>"
    assert trained["last"] == "final answer<|im_end|>"


def test_prefix_break_splits_and_is_counted(trainer: Trainer) -> None:
    # a template that drops <think>...</think> from earlier assistant turns (like reasoning models do)
    template = (
        "{% for m in messages %}{% set c = m['content'] %}"
        "{% if m['role'] == 'assistant' and not loop.last %}{% set c = c.split('</think>')[-1] %}{% endif %}"
        "{{ '<|im_start|>' + m['role'] + '\n' + c + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    from art_train.trainer import check_prefix_preserving

    assert not check_prefix_preserving(trainer.tokenizer, template)
    assert check_prefix_preserving(trainer.tokenizer, trainer.chat_template)
    traj = art.Trajectory(
        messages=[
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "<think>x</think>one"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "<think>y</think>two"},
        ]
    )
    stats = TokenizeStats()
    seqs = tokenize_trajectory(traj, trainer.tokenizer, template, stats=stats, train_unsampled=True)
    assert len(seqs) == 2 and stats.counts["prefix_breaks"] == 1
    assert "<think>x</think>" not in trainer.tokenizer.decode(seqs[1].token_ids)


def test_overlong_truncated_or_dropped_and_counted(trainer: Trainer) -> None:
    long = _answer(trainer, "q", "word " * 60, 1.0)  # ~30 prompt tokens + ~60 answer tokens
    short = _answer(trainer, "q", "ok", 0.0)
    group = art.TrajectoryGroup([long, short])
    for mode, key in (("truncate", "tokenize/overlong_truncated"), ("drop", "tokenize/overlong_dropped")):
        result = trainer.train([group], art.TrainConfig(learning_rate=1e-6, max_seq_len=64, overlong=mode))
        assert result.metrics[key] == 1
        assert result.metrics["sequences"] == (2 if mode == "truncate" else 1)


def test_grpo_learns_to_prefer_the_rewarded_answer(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    model = art.TrainableModel(name="learn", project="t", base_model=str(tiny_model_path))
    rundir = art.RunDir("t", "learn", root=tmp_path)
    trainer = Trainer(model, rundir, device="cpu")
    tok = trainer.tokenizer
    prompt_ids = _render_ids(trainer, [{"role": "user", "content": "yes or no?"}], generation_prompt=True)

    def answer_logprob(text: str) -> float:
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return sum(trainer.sequence_logprobs(prompt_ids + ids)[len(prompt_ids) - 1 :])

    before_yes, before_no = answer_logprob("yes"), answer_logprob("no")
    base_before = {n: p.detach().clone() for n, p in trainer.peft.named_parameters() if "lora_" not in n}
    groups = [
        art.TrajectoryGroup(
            [
                _answer(trainer, "yes or no?", a, 1.0 if a == "yes" else 0.0)
                for a in ("yes", "no", "yes", "no")
            ]
        )
    ]
    metrics = []
    for _ in range(4):
        metrics.append(trainer.train(groups, art.TrainConfig(learning_rate=2e-2)).metrics)
    after_yes, after_no = answer_logprob("yes"), answer_logprob("no")
    assert after_yes > before_yes + 0.5, (before_yes, after_yes)
    assert after_yes - after_no > before_yes - before_no + 1.0
    # base weights untouched, LoRA weights moved
    for n, p in trainer.peft.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base_before[n]), n
    first = load_file(rundir.checkpoint_path(0) / "adapter_model.safetensors")
    last = load_file(rundir.checkpoint_path(4) / "adapter_model.safetensors")
    assert any(not torch.equal(first[k], last[k]) for k in first)
    assert all(torch.count_nonzero(v) == 0 for k, v in first.items() if "lora_B" in k)  # step 0 is empty
    # metrics and history
    assert metrics[0]["trained_tokens"] == 4 * 2 and metrics[0]["groups_trainable"] == 1
    for key in (
        "loss",
        "entropy",
        "kl",
        "clip_fraction",
        "grad_norm",
        "reward_mean",
        "reward_std",
        "time/forward_backward_s",
    ):
        assert key in metrics[0]
    assert [h["step"] for h in rundir.read_history()] == [1, 2, 3, 4]
    assert rundir.read_trajectories("train", 2)[0].rewards() == [1.0, 0.0, 1.0, 0.0]
    # checkpoint step 4 in PEFT format, loadable by peft; sequence_logprobs pins steps
    config = json.loads((rundir.checkpoint_path(4) / "adapter_config.json").read_text())
    assert config["r"] == model.config.lora_rank and config["peft_type"] == "LORA"
    ids = prompt_ids + tok("yes", add_special_tokens=False)["input_ids"]
    assert trainer.sequence_logprobs(ids, step=0) != pytest.approx(trainer.sequence_logprobs(ids), abs=1e-4)
    assert trainer.sequence_logprobs(ids, step=4) == pytest.approx(trainer.sequence_logprobs(ids), abs=1e-6)


def test_peft_loads_saved_checkpoint(trainer: Trainer, tiny_model_path) -> None:  # noqa: ANN001
    from peft import PeftModel

    from art_train.models import load_causal_lm

    group = art.TrajectoryGroup([_answer(trainer, "p", "a", 1.0), _answer(trainer, "p", "b", 0.0)])
    trainer.train(
        [group], art.TrainConfig(learning_rate=1e-2, beta=0.1, loss="dapo", truncated_importance_sampling=2.0)
    )
    loaded = PeftModel.from_pretrained(
        load_causal_lm(tiny_model_path, dtype="float32"), str(trainer.checkpoint_path())
    )
    ids = trainer.tokenizer("hello there friend", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = loaded(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    expected = logits.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
    assert trainer.sequence_logprobs(ids) == pytest.approx(expected, abs=1e-4)


def test_multiple_batches_and_epochs_use_old_policy(trainer: Trainer) -> None:
    groups = [
        art.TrajectoryGroup([_answer(trainer, f"p{i}", a, r) for a, r in (("x", 1.0), ("y", 0.0))])
        for i in range(3)
    ]
    result = trainer.train(
        groups, art.TrainConfig(learning_rate=5e-2, batch_size=2, num_epochs=2, epsilon=0.05)
    )
    assert result.metrics["optimizer_steps"] == 6  # 6 trajectories / 2 per batch x 2 epochs
    assert result.metrics["trained_tokens"] == 12
    assert result.metrics["clip_fraction"] > 0  # later steps move away from the old policy


def test_sft_raises_target_probability(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    # its own trainer: on the module's, how much 3 steps gain depends on which tests ran there before (xdist)
    model = art.TrainableModel(name="sft", project="t", base_model=str(tiny_model_path))
    trainer = Trainer(model, art.RunDir("t", "sft", root=tmp_path), device="cpu")
    messages = [{"role": "user", "content": "capital?"}, {"role": "assistant", "content": "Paris"}]
    trajectories = [art.Trajectory(messages=messages) for _ in range(4)]
    ids = _render_ids(trainer, messages)
    before = sum(trainer.sequence_logprobs(ids))
    for _ in range(3):
        result = trainer.train_sft(trajectories, art.SFTConfig(learning_rate=1e-2, batch_size=2))
    assert result.metrics["tokenize/retokenized_turns"] == 4
    assert result.metrics["optimizer_steps"] == 2
    assert sum(trainer.sequence_logprobs(ids)) > before + 1.0
    assert trainer.rundir.read_history()[-1]["kind"] == "sft"


def test_a_step_that_raises_is_rolled_back_and_not_retrained(tiny_model_path, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from art_train.trainer import trainer as trainer_module

    model = art.TrainableModel(name="boom", project="t", base_model=str(tiny_model_path))
    t = Trainer(model, art.RunDir("t", "boom", root=tmp_path), device="cpu")
    good = [art.TrajectoryGroup([_answer(t, "q", "yes", 1.0), _answer(t, "q", "no", 0.0)])]
    t.train(good, art.TrainConfig(learning_rate=1e-2))
    before = {k: v.clone() for k, v in t.peft.state_dict().items() if "lora" in k}
    real = trainer_module.STEPS["grpo"]

    def moves_then_raises(policy, groups, config, progress, trained):  # noqa: ANN001, ANN202
        real[1](policy, groups, config, progress, trained)  # the weights and optimizer really move
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setitem(trainer_module.STEPS, "grpo", (real[0], moves_then_raises))
    bad = [art.TrajectoryGroup([_answer(t, "bad", "a", 1.0), _answer(t, "bad", "b", 0.0)])]
    with pytest.raises(RuntimeError, match="simulated"):
        t.train(bad, art.TrainConfig(learning_rate=1e-2))
    monkeypatch.setitem(trainer_module.STEPS, "grpo", real)
    after = {k: v for k, v in t.peft.state_dict().items() if "lora" in k}
    assert t.step == 1 and all(torch.equal(before[k], after[k]) for k in before)  # back at checkpoint 1
    assert not (t.rundir.path / "train_pending.json").exists()
    (kept,) = (t.rundir.path / "failed").glob("0002-*.jsonl")  # the failed batch is kept, with its error
    assert "bad" in kept.read_text()
    assert "out of memory (simulated)" in kept.with_suffix(".json").read_text()
    fresh = Trainer(model, art.RunDir("t", "boom", root=tmp_path), device="cpu")  # a restart retrains nothing
    assert fresh.step == 1 and fresh.pending_groups() is None
    result = fresh.train(good, art.TrainConfig(learning_rate=1e-2))
    assert result.step == 2
    assert "bad" not in fresh.rundir.trajectories_path("train", 2).read_text()
