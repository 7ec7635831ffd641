"""The trainer on 2 ranks (gloo, CPU, the tiny model) against 1 rank: same adapter, rank 0 alone writes,
a killed rank fails the step cleanly, and `LocalBackend(train_procs=2)` trains and serves a step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import art_core as art
from art_train.trainer import Row, Trainer
from art_train.trainer.distributed import ChildRanks, RankFailedError, Ranks, Worker, shard_row_groups

# 2 ranks sum the same per-row gradients in another order (each rank's partial sum, then all_reduce), so
# the step's gradient differs from 1 rank's by float32 rounding only (~3e-7 of its largest element,
# `test_rank_shares_sum_to_the_one_rank_gradient`). AdamW's first step divides each element by its own
# magnitude, which turns rounding in near-zero elements into up to a few % of the learning rate: at
# LR = 1e-4 the measured max |1 rank - 2 ranks| over every LoRA tensor is 2.4e-6 after 2 GRPO steps (4
# optimizer steps; 99.9% of elements within 1.2e-7) and after the SFT step, while the weights move by up to 4e-4.
LR = 1e-4
TOLERANCE = 1e-5


def _model(path: Path, name: str) -> art.TrainableModel:
    return art.TrainableModel(name=name, project="ranks", base_model=str(path))


def _groups(trainer: Trainer) -> list[art.TrajectoryGroup]:
    """3 prompts of different lengths x 4 answers with different rewards (no group trains nothing)."""
    tok = trainer.tokenizer
    groups = []
    for g, prompt in enumerate(["Add 2 and 3.", "What is the capital of France? Answer in one word.", "Hi"]):
        trajectories = []
        for i, text in enumerate(["5", "five, I think", "It is 5.", "no idea at all"]):
            ids = tok(f"{text} {g}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            traj = art.Trajectory(messages=[{"role": "user", "content": prompt}], reward=float((i + g) % 3))
            traj.turns.append(art.assistant_turn(text, token_ids=ids, logprobs=[-1.0 - 0.1 * j for j in range(len(ids))]))
            trajectories.append(traj)
        groups.append(art.TrajectoryGroup(trajectories))
    return groups


def _lora(trainer: Trainer) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(trainer.peft).items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


# -- the pure part ---------------------------------------------------------------------------------

def _row(n: int) -> Row:
    t = torch.zeros(n, dtype=torch.long)
    return Row(t, t, t[:1], t[:1], t[:1], t[:1])


def test_shards_cover_every_row_once_and_keep_shared_prompts_together() -> None:
    groups = [(3, [_row(10), _row(10), _row(10)]), (0, [_row(40)]), (5, [_row(8), _row(8)])]
    shards = [shard_row_groups(groups, r, 2) for r in range(2)]
    rows = [id(row) for shard in shards for _, g in shard for row in g]
    assert sorted(rows) == sorted(id(row) for _, g in groups for row in g)
    assert [len(g) for _, g in shards[0]] == [1]  # the 40-token row alone; the two shared prompts on rank 1
    assert [(k, len(g)) for k, g in shards[1]] == [(3, 3), (5, 2)]
    one = [(2, [_row(5), _row(5), _row(5), _row(5)])]  # fewer groups than ranks: the group is split
    assert [[(k, len(g)) for k, g in shard_row_groups(one, r, 2)] for r in range(2)] == [[(2, 2)], [(2, 2)]]
    assert shard_row_groups([(0, [_row(5)])], 1, 2) == []  # a rank may get nothing


def test_rank_shares_sum_to_the_one_rank_gradient(tiny_model_path: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank's share of one GRPO optimizer step, in this process: their gradients add up to 1 rank's."""
    from art_train.trainer import grpo_step

    trainer = Trainer(_model(tiny_model_path, "grads"), art.RunDir("ranks", "grads", tmp_path), device="cpu")
    policy = trainer.policy
    with torch.no_grad():  # B nonzero, so that A's gradients are too
        torch.manual_seed(1)
        for name, p in trainer.peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    captured: list[list[torch.Tensor | None]] = []

    def capture(max_grad_norm: float | None) -> float:  # noqa: ARG001 - in place of sum, clip and step
        captured.append([p.grad.clone() if p.grad is not None else None for p in policy.params()])
        policy.optimizer.zero_grad(set_to_none=True)
        return 0.0

    monkeypatch.setattr(policy, "optimizer_step", capture)
    monkeypatch.setattr(policy, "reduce", lambda values, op="sum": values)  # metrics: not compared here
    groups = _groups(trainer)
    grads = []
    for policy.world, policy.rank in ((1, 0), (2, 0), (2, 1)):
        captured.clear()
        grpo_step(policy, groups, art.TrainConfig(beta=0.05), lambda _: None)  # with reference logprobs
        grads.append(captured[0])
    for whole, a, b in zip(*grads, strict=True):
        assert whole is not None
        parts = (a if a is not None else 0) + (b if b is not None else 0)
        assert float((whole - parts).abs().max()) <= 1e-6 * float(whole.abs().max())  # measured ~3e-7


def test_a_child_rank_imports_rank_0s_code_not_the_working_directorys(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank started from a folder holding another `art_train` imports rank 0's (`python -c` would put the
    folder first; ranks of two versions then deadlock in their first collective)."""
    (tmp_path / "art_train").mkdir()
    (tmp_path / "art_train" / "__init__.py").write_text("raise ImportError('the working directory\'s art_train')\n")
    monkeypatch.chdir(tmp_path)
    env = ChildRanks().env(1, 2, 12345, "cpu", 5.0)
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"], env["PYTHONSAFEPATH"]) == ("1", "2", "12345", "1")
    import art_train

    show = "import art_train; print(art_train.__file__)"
    found = subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == art_train.__file__
    plain = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True)  # what -c alone does
    assert plain.returncode != 0 and "the working directory's art_train" in plain.stderr


def test_a_rank_running_other_code_is_refused_at_start(tmp_path: Path) -> None:
    """A rank whose art_train differs from rank 0's (another install on a Ray node, another checkout) would wait
    in collectives that never meet; rank 0 refuses it as the ranks start, naming both."""
    import shutil

    import art_train

    other = tmp_path / "other"
    shutil.copytree(Path(art_train.__file__).parent, other / "art_train")
    with (other / "art_train" / "trainer" / "distributed.py").open("a") as f:
        f.write("\n# another version\n")

    class OtherCode(ChildRanks):
        def env(self, *args: Any) -> dict[str, str]:
            env = super().env(*args)
            return {**env, "PYTHONPATH": os.pathsep.join([str(other), env["PYTHONPATH"]])}

    ranks = Ranks(2, "cpu", timeout_s=60, launcher=OtherCode())
    try:
        with pytest.raises(RankFailedError, match=r"rank 1 runs other code than rank 0 .*other/art_train/trainer"):
            ranks._start()
        assert not ranks.running
    finally:
        ranks.stop()


def test_art_serve_takes_train_procs() -> None:
    from art_train.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve"]).train_procs == 1
    assert parser.parse_args(["serve", "--train-procs", "2"]).train_procs == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--train-procs", "0"])


def test_art_serve_ray_starts_trainer_ranks_as_ray_actors(monkeypatch: pytest.MonkeyPatch) -> None:
    import art_train.service
    from art_train.cli import build_parser, serve
    from art_train.config import BackendConfig

    configs: list[BackendConfig] = []

    class Built(Exception):
        pass

    def service(config: BackendConfig) -> None:  # in place of ModelService: stop before the server runs
        configs.append(config)
        raise Built

    monkeypatch.setattr(art_train.service, "ModelService", service)
    with pytest.raises(Built):
        serve(build_parser().parse_args(["serve", "--train-procs", "2", "--ray"]))
    assert configs[0].train_launcher == configs[0].replica_launcher == "ray" and configs[0].train_procs == 2
    assert BackendConfig().train_launcher == "local" and BackendConfig().train_ray_options == {}


# -- 2 ranks against 1 ----------------------------------------------------------------------------

class TestTwoRanks:
    """One 2-rank trainer and one 1-rank trainer, shared by these tests (stopped before the service test below:
    a process has one torch.distributed group)."""

    @pytest.fixture(scope="class")
    def two_and_one(self, tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
        """The same model trained on 1 rank and on 2, in run directories of their own; ranks stopped after."""
        ranks = Ranks(2, "cpu", timeout_s=120)
        one = Trainer(_model(tiny_model_path, "one"), art.RunDir("ranks", "one", tmp_path_factory.mktemp("one")),
                      device="cpu")
        two = Trainer(_model(tiny_model_path, "two"), art.RunDir("ranks", "two", tmp_path_factory.mktemp("two")),
                      device="cpu", ranks=ranks)
        yield one, two, ranks
        ranks.stop()


    def test_two_ranks_train_the_same_adapter_as_one(self, two_and_one: Any) -> None:
        one, two, ranks = two_and_one
        groups = _groups(one)
        configs = [art.TrainConfig(learning_rate=LR),  # one optimizer step
                   art.TrainConfig(learning_rate=LR, batch_size=5, beta=0.05)]  # 3 steps: old and reference logprobs
        timings: dict[str, list[float]] = {"1": [], "2": []}
        for config in configs:
            results = {}
            for label, trainer in (("1", one), ("2", two)):
                t0 = time.perf_counter()
                results[label] = trainer.train(groups, config)
                timings[label].append(time.perf_counter() - t0)
            a, b = results["1"].metrics, results["2"].metrics
            for key in ("loss", "entropy", "kl", "clip_fraction", "grad_norm", "sampler_drift/mean_abs",
                        "sampler_drift/max_abs"):
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key
            for key in ("trained_tokens", "optimizer_steps", "rows", "sampler_drift/tokens"):
                assert b[key] == a[key], key
            assert b["work/decoder_tokens"] >= a["work/decoder_tokens"]  # more where a shared prompt is split
        assert ranks.running and len(ranks.pids()) == 1
        grpo_diff = _max_diff(_lora(one), _lora(two))
        assert max(float(v.abs().max()) for v in _lora(one).values()) > 10 * TOLERANCE  # the weights did move
        assert grpo_diff < TOLERANCE

        sft = [t for g in groups for t in g.trajectories]
        a_sft = one.train_sft(sft, art.SFTConfig(learning_rate=LR, batch_size=6))
        b_sft = two.train_sft(sft, art.SFTConfig(learning_rate=LR, batch_size=6))
        assert b_sft.metrics["loss"] == pytest.approx(a_sft.metrics["loss"], rel=1e-5)
        sft_diff = _max_diff(_lora(one), _lora(two))
        assert sft_diff < TOLERANCE
        print(f"max |1 rank - 2 ranks|: GRPO {grpo_diff:.2e}, after SFT {sft_diff:.2e}; "  # noqa: T201 - shown with -s
              f"GRPO step s, 1 rank {timings['1']}, 2 ranks {timings['2']}")


    def test_rank_zero_alone_writes(self, two_and_one: Any, tiny_model_path: Path, tmp_path: Path) -> None:
        one, two, _ = two_and_one
        two.wait_saved()
        rows = [r for r in two.rundir.read_history() if "kind" in r]
        assert [r["step"] for r in rows] == list(range(1, two.step + 1))  # one history row per step, not one per rank
        assert two.checkpoints.pending(two.step) is None
        # a worker's Trainer reads the newest checkpoint and writes nothing, not even step 0
        before = {p: p.stat().st_mtime_ns for p in two.rundir.path.rglob("*")}
        follower = Trainer(two.model, two.rundir, device="cpu", ranks=Worker(1, 2))
        assert follower.step == two.step
        assert {p: p.stat().st_mtime_ns for p in two.rundir.path.rglob("*")} == before
        with pytest.raises(RuntimeError, match="rank 0 saves step 0"):
            Trainer(_model(tiny_model_path, "new"), art.RunDir("ranks", "new", tmp_path), device="cpu", ranks=Worker(1, 2))


    def test_a_killed_rank_fails_the_step_and_the_next_step_starts_it_again(self, two_and_one: Any) -> None:
        one, two, ranks = two_and_one
        groups = _groups(two)
        config = art.TrainConfig(learning_rate=LR)
        step, weights = two.step, _lora(two)
        (victim,) = ranks.pids()

        fired: list[int] = []

        def kill_rank_1(event: dict[str, Any]) -> None:  # at the first rows trained (a chunk of rows may count several)
            if event["phase"] == "forward_backward" and not fired:
                fired.append(event["done"])
                os.kill(victim, signal.SIGKILL)

        t0 = time.perf_counter()
        with pytest.raises(RankFailedError, match=r"rank 1 exited with code -9.*start again"):
            two.train(groups, config, progress=kill_rank_1)
        assert time.perf_counter() - t0 < 30  # no hang until the group's timeout
        assert two.step == step and _max_diff(_lora(two), weights) == 0  # rolled back
        assert not ranks.running
        failed = list((two.rundir.path / "failed").rglob("*.jsonl")) if (two.rundir.path / "failed").exists() else []
        assert failed or two.checkpoints.pending(step) is not None, "the step's trajectories are kept"

        result = two.train(groups, config)  # ranks 1.. start again, from the newest checkpoint
        assert result.step == step + 1 and ranks.running and ranks.pids() != [victim]
        reference = one.train(groups, config)
        assert reference.step == result.step
        assert _max_diff(_lora(one), _lora(two)) < TOLERANCE


# -- through the service ----------------------------------------------------------------------------

@pytest.mark.parametrize("shard", [None, "fsdp"])
async def test_local_backend_with_two_train_procs_trains_and_serves(tiny_model_path: Path, tmp_path: Path,
                                                                    shard: str | None) -> None:
    from art_train import LocalBackend

    backend = LocalBackend(path=tmp_path, train_procs=2, train_shard=shard, sync_probe_tokens=32)
    model = _model(tiny_model_path, "served")
    try:
        await model.register(backend)
        if shard:  # registered with the ranks, its base sharded, as the trainer was built
            assert backend.service._ranks is not None and backend.service._ranks.running
        client = model.openai_client()
        prompt = [{"role": "user", "content": "Say something."}]

        async def rollout(i: int) -> art.Trajectory:
            with art.capture() as traj:
                r = await client.chat.completions.create(model=model.served_name(), messages=prompt, max_tokens=6,
                                                         temperature=1.0, seed=i)
            traj.reward = float(len(r.choices[0].message.content or "") % 3)
            return traj

        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(rollout(g * 4 + i) for i in range(4)) for g in range(2)],
            show_progress=False)
        result = await model.train(groups, config=art.TrainConfig(learning_rate=5e-2), verbose=False)
        assert result.step == 1
        assert result.metrics["weight_sync/max_abs_diff"] < 2e-3
        ranks = backend.service._ranks
        assert ranks is not None and ranks.running
        r = await client.chat.completions.create(model=model.served_name(), messages=prompt, max_tokens=4)
        assert r.model_extra["art_step"] == 1
    finally:
        await backend.close()
    assert not ranks.running  # closing the backend stops rank 1
