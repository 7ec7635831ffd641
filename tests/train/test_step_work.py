"""The step's work, counted exactly: a change that makes the GRPO step do more fails here, not in a benchmark.

Shapes like an agent's step: several tasks under one system prompt, several rollouts per task. Each
task's rollouts share their whole prompt (system prompt and question); a task must not be merged with
another just because both start with the system prompt (that costs each rollout its prompt's forward:
the 1.7x step regression of 3d383b1).
"""

from __future__ import annotations

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


def test_grpo_step_decoder_work_is_exact(tiny_model_path, tmp_path) -> None:  # noqa: ANN001
    import art_core as art
    from art_train.trainer import Trainer

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
        expected_tokens += k + sum(len(s) - k for s in seqs)
        trained += sum(sum(s.mask[1:]) for s in seqs)
    params = list(trainer.policy.causal_lm.parameters())
    with saved_bytes_peak(params) as saved:
        m = trainer.train(groups, art.TrainConfig(learning_rate=1e-4, beta=0.0)).metrics
    assert m["trained_tokens"] == trained
    assert m["work/decoder_tokens"] == expected_tokens
    assert m["work/decoder_calls"] == len(TASKS) + len(TASKS) * len(ANSWERS)  # a prefix per task, a suffix per row
    assert m["work/decoder_calls_per_row"] == (len(TASKS) + 9) / 9

    # memory: the step never holds more for backward than one whole rollout does alone (+25% slack:
    # the shared prompt's graph waits for its group's last row)
    longest = max((s for g in groups for t in g.trajectories for s in _tokenized(trainer, t)), key=len)
    (row,), _ = build_rows([longest], capacity=1)
    with trainer.policy.training(), saved_bytes_peak(params) as alone:
        logp, _ = row_logprobs(trainer.policy.causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets)
        logp.sum().backward()
    trainer.policy.optimizer.zero_grad(set_to_none=True)
    assert alone.peak > 0 and saved.peak > 0
    assert saved.peak <= 1.25 * alone.peak, (saved.peak, alone.peak)


def test_saved_bytes_peak_counts_and_releases() -> None:
    w = torch.randn(64, 64, requires_grad=True)
    with saved_bytes_peak([w]) as saved:
        x = torch.randn(10, 64, requires_grad=True)
        y = (x @ w).tanh()  # saves x ([10, 64] float32 = 2,560 bytes; w is a weight, not counted) and tanh's output
        assert saved.current == 2 * 10 * 64 * 4
        y.sum().backward()
        del y
    assert saved.peak == 2 * 10 * 64 * 4 and saved.current == 0
