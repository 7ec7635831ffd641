"""The step's work, counted exactly: a change that makes the GRPO step do more fails here, not in a benchmark.

Shapes like an agent's step: several tasks under one system prompt, several rollouts per task. Each
task's rollouts share their whole prompt (system prompt and question); a task must not be merged with
another just because both start with the system prompt (that costs each rollout its prompt's forward:
the 1.7x step regression of 3d383b1).
"""

from __future__ import annotations

import pytest
import torch

from art_train.trainer import build_rows, prefix_groups, row_logprobs
from art_train.trainer.tokenize import Sequence, TokenizeStats, tokenize_trajectory
from art_train.trainer.work import saved_bytes_peak

SYSTEM = "You are a careful assistant. Answer with one short sentence and nothing else, please."
TASKS = ["What is the capital of France?", "Name a prime number above ten.", "Which planet is the largest?"]
ANSWERS = ["It is Paris, of course.", "Thirteen", "Jupiter is the largest planet of the solar system."]


def _sequences(system: list[int], questions: list[list[int]], answers: list[int]) -> list[Sequence]:
    out = []
    for question in questions:
        for n in answers:
            prompt = system + question
            ids = prompt + [7 + i for i in range(n)]
            out.append(Sequence(ids, [False] * len(prompt) + [True] * n, [float("nan")] * len(ids)))
    return out


def test_rollouts_of_a_task_share_their_whole_prompt_not_only_the_system_prompt() -> None:
    # 3 tasks x 3 rollouts: 20-token system prompt, then a 12-token question per task
    system = list(range(100, 120))
    questions = [list(range(200 + 20 * t, 212 + 20 * t)) for t in range(3)]
    rows, _ = build_rows(_sequences(system, questions, [5, 9, 3]), capacity=1)
    groups = prefix_groups(rows)
    # each task's group shares 20 + 12 - 1 = 31 tokens (the last prompt token predicts the answer)
    assert [(k, len(g)) for k, g in groups] == [(31, 3), (31, 3), (31, 3)]


def test_distinct_questions_share_the_system_prompt() -> None:
    # SFT: one example per question, all under one system prompt: one group sharing the 20 tokens
    system = list(range(100, 120))
    questions = [list(range(200 + 20 * t, 212 + 20 * t)) for t in range(3)]
    rows, _ = build_rows(_sequences(system, questions, [6]), capacity=1)
    assert [(k, len(g)) for k, g in prefix_groups(rows)] == [(20, 3)]


def _groups(tok):  # noqa: ANN001, ANN202
    import art_core as art

    groups = []
    for task in TASKS:
        trajs = []
        for r, answer in enumerate(ANSWERS):
            ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            t = art.Trajectory(
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}], reward=float(r)
            )
            t.turns.append(art.assistant_turn(answer, token_ids=ids, logprobs=[-1.0] * len(ids)))
            trajs.append(t)
        groups.append(art.TrajectoryGroup(trajs))
    return groups


def _tokenized(trainer, trajectory) -> list[Sequence]:  # noqa: ANN001
    return tokenize_trajectory(trajectory, trainer.tokenizer, trainer.policy.chat_template, stats=TokenizeStats())


@pytest.mark.parametrize("together", [False, True], ids=["row_by_row", "rows_together"])
def test_grpo_step_decoder_work_is_exact(tiny_model_path, tmp_path, monkeypatch, together) -> None:  # noqa: ANN001
    import art_core as art
    from art_train.trainer import Trainer
    from art_train.trainer import policy as policy_module

    if not together:  # ROW_BATCH_TOKENS 0: a decoder call a row, as before rows ran together
        monkeypatch.setattr(policy_module, "ROW_BATCH_TOKENS", 0)
    model = art.TrainableModel(name="work", project="t", base_model=str(tiny_model_path))
    trainer = Trainer(model, art.RunDir("t", "work", root=tmp_path), device="cpu")
    groups = _groups(trainer.tokenizer)
    # what the step should run, from the sequences it trains: each task's prompt once, then every
    # rollout's own tokens (beta 0 and one optimizer step: no reference or old-policy forward)
    expected_tokens = 0
    trained = 0
    for group in groups:
        seqs = [s for t in group.trajectories for s in _tokenized(trainer, t)]
        k = min(s.mask.index(True) for s in seqs) - 1
        # together: a task's rollouts right-padded to its longest, in one call after the prompt
        expected_tokens += k + (len(seqs) * max(len(s) - k for s in seqs) if together else sum(len(s) - k for s in seqs))
        trained += sum(sum(s.mask[1:]) for s in seqs)
    params = list(trainer.policy.causal_lm.parameters())
    with saved_bytes_peak(params) as saved:
        m = trainer.train(groups, art.TrainConfig(learning_rate=1e-4, beta=0.0)).metrics
    assert m["trained_tokens"] == trained
    assert m["work/decoder_tokens"] == expected_tokens
    rest_calls = len(TASKS) if together else len(TASKS) * len(ANSWERS)  # a task's rollouts in one call, or one each
    assert m["work/decoder_calls"] == len(TASKS) + rest_calls  # a prefix per task, then the rests
    assert m["work/decoder_calls_per_row"] == (len(TASKS) + rest_calls) / 9

    # memory: row by row, the step never holds more for backward than one whole rollout does alone
    # (+25% slack: the shared prompt's graph waits for its group's last row); together, than a task's
    # three rollouts would
    longest = max((s for g in groups for t in g.trajectories for s in _tokenized(trainer, t)), key=len)
    (row,), _ = build_rows([longest], capacity=1)
    with trainer.policy.training(), saved_bytes_peak(params) as alone:
        logp, _ = row_logprobs(trainer.policy.causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets)
        logp.sum().backward()
    trainer.policy.optimizer.zero_grad(set_to_none=True)
    assert alone.peak > 0 and saved.peak > 0
    assert saved.peak <= 1.25 * (len(ANSWERS) if together else 1) * alone.peak, (saved.peak, alone.peak)


def test_saved_bytes_peak_counts_and_releases() -> None:
    w = torch.randn(64, 64, requires_grad=True)
    with saved_bytes_peak([w]) as saved:
        x = torch.randn(10, 64, requires_grad=True)
        y = (x @ w).tanh()  # saves x ([10, 64] float32 = 2,560 bytes; w is a weight, not counted) and tanh's output
        assert saved.current == 2 * 10 * 64 * 4
        y.sum().backward()
        del y
    assert saved.peak == 2 * 10 * 64 * 4 and saved.current == 0


def _sft_data():  # noqa: ANN202
    import art_core as art

    return [art.Trajectory(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": task},
                                     {"role": "assistant", "content": answer}])
            for task in TASKS for answer in ANSWERS]  # fmt: skip


def test_sft_runs_short_rows_in_one_decoder_call_with_the_same_loss(tiny_model_path, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    import art_core as art
    from art_train.trainer import Trainer
    from art_train.trainer import policy as policy_module

    metrics = {}
    for budget in (0, 1024):  # 0: a decoder call a row, as before
        monkeypatch.setattr(policy_module, "ROW_BATCH_TOKENS", budget)
        model = art.TrainableModel(name=f"sft{budget}", project="t", base_model=str(tiny_model_path))
        trainer = Trainer(model, art.RunDir("t", f"sft{budget}", root=tmp_path), device="cpu")
        metrics[budget] = trainer.train_sft(_sft_data(), art.SFTConfig(learning_rate=1e-3, batch_size=9)).metrics
        trainer.close()
    one, together = metrics[0], metrics[1024]
    assert together["loss"] == pytest.approx(one["loss"], rel=1e-5) and together["trained_tokens"] == one["trained_tokens"]
    assert one["work/decoder_calls"] == 3 + 9  # each task's prompt (its three answers share it), then a call a row
    assert together["work/decoder_calls"] == 3 + 3  # each task's prompt, then its three answers padded together


def test_rows_run_together_give_each_row_its_own_logprobs_and_gradients(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    import art_core as art
    from art_train.trainer import SharedPrefix, Trainer, prefix_groups, rows_logprobs

    model = art.TrainableModel(name="rows", project="t", base_model=str(tiny_model_path))
    trainer = Trainer(model, art.RunDir("t", "rows", root=tmp_path), device="cpu")
    lm = trainer.policy.causal_lm
    with torch.no_grad():  # LoRA B is 0 at first: give the adapter gradients of its own to compare
        for name, p in lm.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    seqs = [s for t in _sft_data() for s in tokenize_trajectory(t, trainer.tokenizer, trainer.policy.chat_template,
                                                                   stats=TokenizeStats(), train_unsampled=True)]  # fmt: skip
    rows, _ = build_rows(seqs, capacity=1)
    k, group = prefix_groups(rows)[0]  # a task's prompt and its three answers
    lora = [p for n, p in lm.named_parameters() if "lora_" in n]

    def run(together: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        prefix = SharedPrefix(lm, group[0].input_ids[:k])
        if together:
            outs = rows_logprobs(lm, [(r.input_ids, r.position_ids, r.pred_index, r.targets) for r in group], prefix=prefix)
        else:
            outs = [row_logprobs(lm, r.input_ids, r.position_ids, r.pred_index, r.targets, prefix=prefix) for r in group]
        torch.cat([logp * (i + 1) for i, (logp, _) in enumerate(outs)]).sum().backward()  # each row weighted apart
        prefix.backward()
        grads = [p.grad.clone() for p in lora]
        lm.zero_grad(set_to_none=True)
        return [logp.detach() for logp, _ in outs], grads

    alone, grads_alone = run(False)
    together, grads_together = run(True)
    assert [len(x) for x in together] == [len(x) for x in alone] and len({len(x) for x in alone}) > 1  # padded
    for a, b in zip(alone, together, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_alone, grads_together, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    trainer.close()


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_grpo_rows_together_train_as_row_by_row(tiny_model_path, tmp_path, monkeypatch, level) -> None:  # noqa: ANN001
    """Two epochs (old logprobs, ratios away from 1, clipping) and sequence-level ratios, whose sequences
    a chunk must keep apart: the same loss, clipping and weights as a decoder call a row."""
    import art_core as art
    from art_train.trainer import Trainer
    from art_train.trainer import policy as policy_module

    results = {}
    for budget in (0, policy_module.ROW_BATCH_TOKENS):
        monkeypatch.setattr(policy_module, "ROW_BATCH_TOKENS", budget)
        model = art.TrainableModel(name=f"g{budget}", project="t", base_model=str(tiny_model_path))
        trainer = Trainer(model, art.RunDir("t", f"g{budget}", root=tmp_path), device="cpu")
        config = art.TrainConfig(learning_rate=5e-2, num_epochs=2, importance_sampling_level=level, epsilon=0.05)
        m = trainer.train(_groups(trainer.tokenizer), config).metrics
        results[budget] = (m, {n: p.detach().clone() for n, p in trainer.peft.named_parameters() if "lora_" in n})
        trainer.close()
    (one, w_one), (together, w_together) = results.values()
    assert one["work/decoder_calls"] > together["work/decoder_calls"]
    assert one["clip_fraction"] > 0  # the second epoch clips: the ratios really left 1
    for key in ("loss", "clip_fraction", "entropy", "trained_tokens"):
        assert together[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key
    for name, w in w_one.items():
        torch.testing.assert_close(w_together[name], w, rtol=1e-3, atol=2e-4)  # lr 5e-2: a real difference moves ~lr


def test_rows_go_together_only_while_their_padding_stays_small() -> None:
    from types import SimpleNamespace

    import art_core as art
    from art_train.trainer.policy import ROW_BATCH_TOKENS, Policy

    def chunks(rests: list[int]) -> list[list[int]]:
        system = list(range(100, 110))  # 10 shared tokens
        seqs = [Sequence(system + [7] * n, [False] * 10 + [True] * n, [float("nan")] * (10 + n)) for n in rests]
        rows, _ = build_rows(seqs, capacity=1)
        cpu = SimpleNamespace(shares_rows=lambda _c: True)
        return [[int(r.input_ids.shape[0]) - 10 for r in c] for c in Policy.row_chunks(cpu, rows, 10, art.TrainConfig())]  # type: ignore[arg-type]

    assert ROW_BATCH_TOKENS == 1024
    assert chunks([30, 1000, 40, 50]) == [[1000], [50, 40, 30]]  # an agent's long rollout alone; short ones padded to 50
    assert chunks([200, 300]) == [[300], [200]]  # 100 tokens of padding: more than a quarter of 300
    assert chunks([300, 240, 230]) == [[300, 240, 230]]
    assert chunks([300, 290, 280, 270]) == [[300, 290, 280], [270]]  # four rows of 300 pass 1,024 tokens
