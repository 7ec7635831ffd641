"""`art report`: the static page in headless Chromium (no console errors; the curve and a trajectory on
screen), its controls, and a 10,000-trajectory run that loads one step at a time."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import art_core as art
from art_train.report import build_report

from .cdp import Page, find_chromium
from .conftest import Run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(find_chromium() is None, reason="needs Chromium (scripts/setup_chromium.sh)")


@pytest.fixture(scope="module")
def report(run: Run) -> Path:
    out = subprocess.run([sys.executable, "-m", "art_train.cli", "report", str(run.rundir)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return run.rundir / "report" / "index.html"


def _rect(page: Page, selector: str) -> dict:
    return page.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                         " return {x: r.x, y: r.y, w: r.width, h: r.height}; })()")


def _pixels(png: bytes, rect: dict, rgb: tuple[int, int, int], tol: int = 40) -> int:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    box = (int(rect["x"]), int(rect["y"]), int(rect["x"] + rect["w"]), int(rect["y"] + rect["h"]))
    crop = img.crop(box)
    return sum(1 for p in crop.getdata() if all(abs(a - b) <= tol for a, b in zip(p, rgb, strict=True)))


def test_report_loads_clean_and_shows_the_curve_and_a_trajectory(run: Run, report: Path, tmp_path: Path) -> None:
    groups = art.RunDir("obs", "obs-run", run.home).read_trajectories("train", 2)
    traj = groups[1].trajectories[2]
    sample = traj.turns[-1]["sample"]
    with Page(1400, 1000) as page:
        page.goto(f"{report.as_uri()}#step=train-0002&group=1&traj={traj.id}")
        assert page.errors() == []
        # the reward curve: train at steps 1 and 2, val at step 2, as in history.jsonl
        assert page.evaluate("document.querySelectorAll('#reward-chart circle[data-split=train]').length") == 2
        assert page.evaluate("document.querySelectorAll('#reward-chart circle[data-split=val]').length") == 1
        assert page.evaluate("document.querySelector('#reward-chart path[data-series=train]').getAttribute('d')"
                             ).count("L") == 1
        assert page.evaluate("document.querySelectorAll('#steps-table tbody tr').length") == 3
        # the trajectory asked for, selected, with its reward, tool call, RULER note and shaded tokens
        card = f".traj[data-id='{traj.id}']"
        assert page.evaluate(f"document.querySelector(\"{card}\").classList.contains('selected')")
        text = page.evaluate(f"document.querySelector(\"{card}\").innerText")
        assert f"reward {traj.reward:.3f}" in text or f"reward {int(traj.reward)}" in text
        assert "get_weather" in text and "sunny, 21 C" in text and "RULER judge" in text
        assert page.evaluate(f"document.querySelectorAll(\"{card} .tok\").length") == len(sample["token_ids"])
        first = page.evaluate(f"document.querySelector(\"{card} .tok\").style.background")
        alpha = min(0.85, 1 - 2.718281828459045 ** round(sample["logprobs"][0], 4))
        assert first == f"rgba(220, 38, 38, {float(f'{alpha:.3f}'):g})"
        png = page.screenshot()
        (tmp_path / "report.png").write_bytes(png)
        chart, selected = _rect(page, "#reward-chart"), _rect(page, card)
        for r in (chart, selected):  # both inside the 1400x1000 screenshot
            assert r["x"] >= 0 and r["y"] >= 0 and r["x"] + r["w"] <= 1400 and r["y"] + r["h"] <= 1000, r
        assert _pixels(png, chart, (0x25, 0x63, 0xEB)) > 200  # the blue train curve is drawn
        assert _pixels(png, selected, (220, 38, 38), tol=90) > 50  # tokens shaded by logprob
        assert page.errors() == []


def test_sort_filter_and_steps_load_on_demand(run: Run, report: Path) -> None:
    with Page() as page:
        page.goto(report.as_uri() + "#step=train-0001")
        scripts = "document.querySelectorAll('script[src^=\"data/\"]').length"
        assert page.evaluate(scripts) == 1
        page.evaluate("(() => { const s = document.getElementById('sort-select'); s.value = 'reward-desc';"
                      " s.dispatchEvent(new Event('change')); })()")
        rewards = page.evaluate("[...document.querySelectorAll('.traj .reward')].map(e => +e.textContent.split(' ')[1])")
        saved = [t.reward for g in art.RunDir("obs", "obs-run", run.home).read_trajectories("train", 1) for t in g.trajectories]
        assert rewards == pytest.approx(sorted(saved, reverse=True), abs=1e-3)
        page.evaluate("(() => { const i = document.getElementById('min-reward'); i.value = '0.5';"
                      " i.dispatchEvent(new Event('input')); })()")
        shown = page.evaluate("[...document.querySelectorAll('.traj .reward')].map(e => +e.textContent.split(' ')[1])")
        assert shown == [r for r in rewards if r >= 0.5]
        page.evaluate("window.artOpen('val-0002')", await_promise=True)
        assert page.evaluate("window.ART_RENDERED.key") == "val-0002" and page.evaluate(scripts) == 2
        assert page.errors() == []


def test_a_missing_step_file_says_what_to_do(report: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "report"
    shutil.copytree(report.parent, copy)
    (copy / "data" / "train-0001.js").unlink()
    with Page() as page:
        page.goto(copy.joinpath("index.html").as_uri() + "#step=train-0001",
                  ready="document.getElementById('cards').innerText.includes('could not load')")
        assert "keep the report's data/ folder next to index.html" in page.evaluate("document.getElementById('cards').innerText")


def test_not_a_run_directory_is_a_clear_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "art_train.cli", "report", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "is not a run directory" in " ".join(out.stderr.split())


def make_large_run(root: Path, steps: int = 100, groups: int = 10, size: int = 10, seed: int = 0) -> Path:
    """A run directory of steps x groups x size trajectories (10,000 by default), written as the trainer does."""
    rng = random.Random(seed)
    rundir = art.RunDir("big", "big-run", root)
    rundir.write_model({"name": "big-run", "project": "big", "base_model": "not-on-this-machine"})
    for step in range(1, steps + 1):
        gs = []
        for g in range(groups):
            trajs = []
            for i in range(size):
                n = rng.randint(10, 40)
                t = art.Trajectory(messages=[{"role": "system", "content": "You answer briefly."},
                                             {"role": "user", "content": f"question {g} of step {step}"}],
                                   reward=rng.random())
                t.turns.append(art.assistant_turn(f"answer {i}", token_ids=[rng.randrange(49000) for _ in range(n)],
                                                  logprobs=[-rng.random() * 3 for _ in range(n)], step=step - 1))
                t.log(f"RULER judge: {t.reward:.2f}: answer {i} of group {g}")
                trajs.append(t)
            gs.append(art.TrajectoryGroup(trajs))
        rundir.write_trajectories("train", step, gs)
        rundir.append_history({"step": step, "kind": "grpo", "reward_mean": rng.random(), "loss": rng.random()})
    return rundir.path


@pytest.mark.heavy
def test_ten_thousand_trajectories_open_one_step_at_a_time(tmp_path: Path) -> None:
    path = make_large_run(tmp_path)
    index = build_report(path, tokens=False)
    data = sorted((index.parent / "data").iterdir())
    assert len(data) == 100
    assert index.stat().st_size < 200_000  # the index holds summaries, not trajectories
    with Page() as page:
        page.goto(index.as_uri())
        assert page.errors() == []
        assert page.evaluate("document.querySelectorAll('script[src^=\"data/\"]').length") == 1
        assert page.evaluate("document.querySelectorAll('#reward-chart circle').length") == 100
        assert page.evaluate("document.getElementById('subtitle').textContent").count("10000 trajectories") == 1
        page.evaluate("(() => { const s = document.getElementById('sort-select'); s.value = 'reward-asc';"
                      " s.dispatchEvent(new Event('change')); })()")
        assert page.evaluate("window.ART_RENDERED.cards") == 40  # one page of 100, with "show more"
        page.evaluate("document.getElementById('more').click()")
        assert page.evaluate("window.ART_RENDERED.cards") == 80
        page.evaluate("window.artOpen('train-0050')", await_promise=True)
        assert page.evaluate("document.querySelectorAll('script[src^=\"data/\"]').length") == 2
        assert page.errors() == []
