"""Packed rows give the same logprobs, loss and LoRA gradients as one sequence at a time."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from art_train.models import load_causal_lm
from art_train.trainer import (
    Sequence,
    SharedPrefix,
    build_rows,
    pack_indices,
    prefix_groups,
    row_logprobs,
    selected_logprobs,
)


def test_pack_indices_first_fit_decreasing() -> None:
    # capacity 10: 7 opens row 0, 5 opens row 1, 3 fits row 0 (7+3), 4 fits row 1 (5+4), 2 opens row 2
    assert pack_indices([3, 7, 5, 4, 2], 10) == [[1, 0], [2, 3], [4]]


def test_selected_logprobs_match_full_log_softmax() -> None:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 16, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (7,), generator=g)
    coef = torch.randn(7, generator=g, dtype=torch.float64)
    logp, entropy = selected_logprobs(hidden, weight, targets, chunk=3)  # chunks of 3, 3, 1
    (logp * coef).sum().backward()
    gh, gw = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    full = torch.log_softmax(hidden @ weight.T, dim=-1)
    ref = full.gather(1, targets[:, None])[:, 0]
    (ref * coef).sum().backward()
    assert torch.allclose(logp.double(), ref, atol=1e-5)
    assert torch.allclose(entropy.double(), -(full.exp() * full).sum(-1), atol=1e-5)
    assert torch.allclose(gh, hidden.grad, atol=1e-6) and torch.allclose(gw, weight.grad, atol=1e-6)


def test_selected_logprobs_with_a_frozen_head_multiply_twice() -> None:
    # a frozen head (LoRA) keeps P @ W in forward: backward's gradient is W[target] - P @ W, no matmul
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 16, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 50, (7,), generator=g)
    coef = torch.randn(7, generator=g, dtype=torch.float64)
    counter = FlopCounterMode(display=False)
    with counter:
        logp, _ = selected_logprobs(hidden, weight, targets, chunk=3)
        (logp * coef).sum().backward()
    assert counter.get_total_flops() == 2 * (2 * 7 * 50 * 16)  # the logits and P @ W, both in forward
    gh = hidden.grad.clone()
    hidden.grad = None
    full = torch.log_softmax(hidden @ weight.T, dim=-1)
    ref = full.gather(1, targets[:, None])[:, 0]
    (ref * coef).sum().backward()
    assert torch.allclose(logp.double(), ref, atol=1e-5) and torch.allclose(gh, hidden.grad, atol=1e-6)
    with torch.no_grad(), FlopCounterMode(display=False) as nograd:
        selected_logprobs(hidden, weight, targets, chunk=3)
    assert nograd.get_total_flops() == 2 * 7 * 50 * 16  # no P @ W where nothing will go backward


def _lora_model(path):  # noqa: ANN001, ANN202
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(
        load_causal_lm(path, dtype="float32", device="cpu"),
        LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
        ),
    )
    return model


def _sequences() -> list[Sequence]:
    g = torch.Generator().manual_seed(1)
    out = []
    for n in (37, 12, 60, 5, 23):
        ids = torch.randint(0, 49152, (n,), generator=g).tolist()
        mask = (torch.rand(n, generator=g) > 0.4).tolist()
        out.append(Sequence(ids, mask, [float("nan")] * n))
    return out


def _loss_and_grads(model, rows, n_tokens: int, coef: torch.Tensor):  # noqa: ANN001, ANN202
    model.zero_grad()
    logp_all = torch.zeros(n_tokens)
    causal_lm = model.get_base_model()
    for row in rows:
        logp, _ = row_logprobs(
            causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets, chunk=16
        )
        (logp * coef[row.token_index]).sum().backward()
        logp_all[row.token_index] = logp.detach()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return logp_all, grads


def test_packed_and_unpacked_losses_and_grads_agree(tiny_model_path) -> None:  # noqa: ANN001
    model = _lora_model(tiny_model_path)
    seqs = _sequences()
    packed_rows, seq_of_token = build_rows(seqs, capacity=200)
    assert len(packed_rows) == 1  # all five sequences share one row
    n = len(seq_of_token)
    coef = torch.linspace(-1, 1, n)
    packed_logp, packed_grads = _loss_and_grads(model, packed_rows, n, coef)
    single_rows, same_order = build_rows(seqs, capacity=60)  # 60 = longest: FFD still packs some
    one_each = []
    offset = 0
    for seq in seqs:  # one row per sequence, token_index shifted into the batch's flat arrays
        (row,), sot = build_rows([seq], capacity=len(seq))
        row.token_index = row.token_index + offset
        offset += len(sot)
        one_each.append(row)
    assert torch.equal(same_order, seq_of_token)
    unpacked_logp, unpacked_grads = _loss_and_grads(model, one_each, n, coef)
    assert torch.allclose(packed_logp, unpacked_logp, atol=1e-5)
    assert float((packed_logp * coef).sum()) == __import__("pytest").approx(
        float((unpacked_logp * coef).sum()), abs=1e-5
    )
    for name, grad in packed_grads.items():
        assert torch.allclose(grad, unpacked_grads[name], atol=1e-5), name
    assert any(g.abs().sum() > 0 for g in packed_grads.values())


def test_packing_without_position_reset_would_leak(tiny_model_path) -> None:  # noqa: ANN001
    # guard against the test above passing vacuously: with positions 0..L-1 the packed row attends across
    model = _lora_model(tiny_model_path)
    seqs = _sequences()
    (row,), seq_of_token = build_rows(seqs, capacity=200)
    causal_lm = model.get_base_model()
    with torch.no_grad():
        good, _ = row_logprobs(causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets)
        leaky, _ = row_logprobs(
            causal_lm, row.input_ids, torch.arange(len(row.input_ids)), row.pred_index, row.targets
        )
    assert not torch.allclose(good, leaky, atol=1e-3)


def _prompt_sharing_sequences() -> list[Sequence]:
    # three rollouts of one task: the same 24-token prompt, different sampled answers (trained)
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 49152, (24,), generator=g).tolist()
    out = []
    for n in (30, 7, 18):
        answer = torch.randint(0, 49152, (n,), generator=g).tolist()
        out.append(Sequence(prompt + answer, [False] * 24 + [True] * n, [float("nan")] * (24 + n)))
    out.append(
        Sequence(torch.randint(0, 49152, (40,), generator=g).tolist(), [False] * 20 + [True] * 20, [0.0] * 40)
    )
    return out


def _system_sharing_sequences() -> list[Sequence]:
    # SFT examples of two tasks: one 20-token system prompt, then each task's own 6-token question
    g = torch.Generator().manual_seed(3)
    system = torch.randint(0, 49152, (20,), generator=g).tolist()
    out = []
    for task, n in ((0, 9), (1, 14), (0, 5)):
        question = torch.Generator().manual_seed(10 + task)
        prompt = system + torch.randint(0, 49152, (6,), generator=question).tolist()
        answer = torch.randint(0, 49152, (n,), generator=g).tolist()
        out.append(Sequence(prompt + answer, [False] * 26 + [True] * n, [float("nan")] * (26 + n)))
    out.append(Sequence(torch.randint(0, 49152, (30,), generator=g).tolist(), [False] * 10 + [True] * 20, [0.0] * 30))
    return out


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        # three rollouts of one prompt: the prompt ends one token before the first answer token (that
        # position predicts it)
        (_prompt_sharing_sequences, [(0, 1), (23, 3)]),
        # two tasks under one system prompt: they share the system prompt only
        (_system_sharing_sequences, [(0, 1), (20, 3)]),
    ],
)
@pytest.mark.parametrize("recompute", [False, True])
def test_shared_prefix_matches_whole_sequences(tiny_model_path, make, expected, recompute) -> None:  # noqa: ANN001
    model = _lora_model(tiny_model_path)
    seqs = make()
    rows, seq_of_token = build_rows(seqs, capacity=1)  # one sequence per row
    groups = prefix_groups(rows)
    assert sorted((k, len(g)) for k, g in groups) == expected
    n = len(seq_of_token)
    coef = torch.linspace(-1, 1, n)
    whole_logp, whole_grads = _loss_and_grads(model, rows, n, coef)
    model.zero_grad()
    causal_lm = model.get_base_model()
    shared_logp = torch.zeros(n)
    for k, group in groups:
        prefix = SharedPrefix(causal_lm, group[0].input_ids[:k], recompute=recompute) if k else None
        for row in group:
            logp, _ = row_logprobs(
                causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets, prefix=prefix
            )
            (logp * coef[row.token_index]).sum().backward()
            shared_logp[row.token_index] = logp.detach()
        if prefix is not None:
            prefix.backward()
    assert torch.allclose(shared_logp, whole_logp, atol=1e-5)
    for name, grad in whole_grads.items():
        p = dict(model.named_parameters())[name]
        assert torch.allclose(p.grad, grad, atol=1e-5), name
    # the prompt's own LoRA gradient arrives only through prefix.backward(): q_proj of layer 0 sees it
    assert any(
        g.abs().sum() > 0 for name, g in whole_grads.items() if "layers.0" in name and "lora_B" in name
    )


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_recomputed_prefix_gives_the_kept_prefix_bits(tiny_model_path, dropout) -> None:  # noqa: ANN001
    # the prompt's forward again in backward, with the first forward's random state (LoRA dropout):
    # the same logprobs and gradients bit for bit as keeping its graph, and no graph held meanwhile
    from peft import LoraConfig, get_peft_model

    rows, seq_of_token = build_rows(_prompt_sharing_sequences(), capacity=1)
    (k, group), = [(k, g) for k, g in prefix_groups(rows) if k]
    coef = torch.linspace(-1, 1, len(seq_of_token))
    results = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = get_peft_model(
            load_causal_lm(tiny_model_path, dtype="float32", device="cpu"),
            LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                       lora_dropout=dropout, init_lora_weights=False),
        )
        model.train()
        causal_lm = model.get_base_model()
        torch.manual_seed(1)
        prefix = SharedPrefix(causal_lm, group[0].input_ids[:k], recompute=recompute)
        kept = [t.grad_fn is not None for kv in prefix._kv for t in kv]  # the prompt's graph, held
        logps = []
        for row in group:
            logp, _ = row_logprobs(causal_lm, row.input_ids, row.position_ids, row.pred_index, row.targets,
                                   prefix=prefix)
            (logp * coef[row.token_index]).sum().backward()
            logps.append(logp.detach())
        prefix.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        results.append((kept, torch.cat(logps), grads))
    (kept, logp, grads), (kept_re, logp_re, grads_re) = results
    assert any(kept) and not kept_re  # (layer 0's keys: no LoRA on k_proj, no graph)
    assert torch.equal(logp, logp_re)
    assert grads.keys() == grads_re.keys()
    for name, grad in grads.items():
        assert torch.equal(grad, grads_re[name]), name
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "layers.0" in n and "lora_B" in n)


def _answer_groups(tok):  # noqa: ANN001, ANN202 - two tasks, three answers each
    import art_core as art

    groups = []
    for task in ("two plus two?", "capital of france?"):
        trajs = []
        for answer, reward in (("four is the answer", 1.0), ("five", 0.0), ("it is four, I think", 0.5)):
            ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            t = art.Trajectory(messages=[{"role": "user", "content": task}], reward=reward)
            t.turns.append(art.assistant_turn(answer, token_ids=ids, logprobs=[-1.0] * len(ids)))
            trajs.append(t)
        groups.append(art.TrajectoryGroup(trajs))
    return groups


def _step(trainer, config) -> tuple[dict, dict[str, torch.Tensor]]:  # noqa: ANN001
    # one GRPO step on `_answer_groups`: its metrics and the gradients after clipping, before the update
    grads: dict[str, torch.Tensor] = {}

    def record(optimizer, args, kwargs):  # noqa: ANN001, ANN202
        grads.update({n: p.grad.clone() for n, p in trainer.peft.named_parameters() if p.grad is not None})

    trainer.optimizer.register_step_pre_hook(record)
    return trainer.train(_answer_groups(trainer.tokenizer), config).metrics, grads


def test_trainer_cpu_rows_match_packed_rows(make_trainer) -> None:  # noqa: ANN001
    # the CPU default (one sequence per row, shared prompts) and explicit packing give the same step
    import art_core as art

    def step(pack_tokens: int | None) -> tuple[dict, dict[str, torch.Tensor]]:
        return _step(make_trainer(), art.TrainConfig(learning_rate=1e-3, beta=0.05, pack_tokens=pack_tokens))

    per_row, per_row_grads = step(None)
    packed, packed_grads = step(4096)
    assert packed["rows"] == 1 and per_row["rows"] == 6
    for key in ("loss", "entropy", "kl", "grad_norm"):
        assert per_row[key] == pytest.approx(packed[key], abs=1e-5), key
    assert per_row_grads.keys() == packed_grads.keys() and per_row_grads
    for name, grad in packed_grads.items():
        assert torch.allclose(per_row_grads[name], grad, atol=1e-5), name


def test_the_trainer_recomputes_shared_prompts_when_asked(make_trainer) -> None:  # noqa: ANN001
    # ModelConfig(recompute_prompt=True): the same step bit for bit, each shared prompt forward twice
    import art_core as art

    config = art.TrainConfig(learning_rate=1e-3, beta=0.05)
    trainers = [make_trainer(recompute_prompt=r) for r in (False, True)]
    (kept, kept_grads), (again, again_grads) = (_step(trainer, config) for trainer in trainers)
    assert kept["rows"] == again["rows"] == 6
    assert again["work/decoder_calls"] == kept["work/decoder_calls"] + 2  # two prompts, one more forward each
    for key in ("loss", "entropy", "kl", "grad_norm"):
        assert kept[key] == again[key], key
    assert kept_grads.keys() == again_grads.keys() and kept_grads
    for name, grad in kept_grads.items():
        assert torch.equal(again_grads[name], grad), name
    # with the base sharded over ranks (FSDP), whose forwards must match, a prompt keeps its graph
    policy = trainers[1].policy
    ids = torch.tensor(trainers[1].tokenizer("a shared prompt")["input_ids"])
    assert policy.shared_prefix(ids)._rng is not None
    assert dataclasses.replace(policy, root=object()).shared_prefix(ids)._rng is None
