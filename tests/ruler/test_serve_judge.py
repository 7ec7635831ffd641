"""`art serve` with the bundled SmolLM2 as the judge, end to end through litellm.

A 135M model rarely writes the JSON a judge must; the point is the plumbing: litellm reaches
`art serve`, the reply comes back, and it is either used (scores in [0, 1]) or refused as a wrong
answer after one corrective retry (never a transport error, never a zero-filled reward).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import art_core as art
import ruler
from ruler import RulerStats
from tests.ruler.conftest import rollout
from tests.support.net import free_port

ART = Path(sys.executable).parent / "art"


def serve_available() -> bool:
    try:
        out = subprocess.run([str(ART), "serve", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "--port" in out.stdout


@pytest.fixture
def art_server(tmp_path: Path):
    if not serve_available():
        pytest.skip("`art serve` is not available yet (serving, issue 4)")
    port = free_port()
    env = {**os.environ, "ART_HOME": str(tmp_path / "art"), "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [str(ART), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"art serve did not come up:\n{(tmp_path / 'serve.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # its own process group, stopped by its pid
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_bundled_model_served_by_art_serve_is_a_judge(art_server: str) -> None:
    judge = art.TrainableModel(name="judge", project="ruler-serve", base_model="smollm2-135m")
    await judge.register(art.RemoteBackend(art_server))

    group = art.TrajectoryGroup([rollout("It is invoice-42.", 0.3, searched=True), rollout("No idea.", 0.6)])
    stats = RulerStats()
    # registered with an ART backend: the judge decodes under the group's own schema, so even this
    # 135M model can only give a usable answer (two explanations of at most 300 characters fit in 400)
    out = await ruler.score_group(
        group, judge=judge, litellm_params={"max_tokens": 400, "temperature": 0.0}, stats=stats, timeout=300
    )
    assert out is group
    assert all(0.0 <= r <= 1.0 for r in group.rewards())
    assert [t.metrics["independent_reward"] for t in group.trajectories] == [0.3, 0.6]
    assert stats.judge_calls == 1  # usable at the first answer
    assert stats.prompt_tokens > 100 and stats.completion_tokens > 0  # usage came back through litellm
