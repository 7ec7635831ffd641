"""Security promises, one test each: loopback by default, a key off loopback (compared in constant time),
request size limits, names that cannot leave the run directory, adapters only from the run directory,
and no unpickling of optimizer state."""

from __future__ import annotations

import hmac
import json
import os
import pickle
import shutil
from pathlib import Path

import httpx
import pytest

import art_core as art
from tests.reliability.conftest import Served, assert_still_serving, free_port, start_serve

HI = [{"role": "user", "content": "hi"}]


def _listening(port: int) -> list[str]:
    """Local addresses of sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_art_serve_binds_loopback_by_default(served: Served) -> None:
    from art_train.cli import build_parser

    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"
    assert _listening(served.port) == ["0100007F"]  # 127.0.0.1, nothing else


def test_off_loopback_needs_a_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from art_train.cli import main

    monkeypatch.delenv("ART_API_KEY", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", str(free_port())]) == 2
    assert "pass --api-key KEY" in capsys.readouterr().err


def test_off_loopback_with_a_key_refuses_requests_without_it(tmp_path: Path) -> None:
    server = start_serve(tmp_path, None, "--host", "0.0.0.0", "--api-key", "s3cret")
    try:
        url = f"http://127.0.0.1:{server.port}"
        assert _listening(server.port) == ["00000000"]
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                        {"Authorization": "Bearer s3cret-and-more"}):
            r = httpx.get(f"{url}/v1/models", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert "Authorization: Bearer <key>" in r.json()["error"]["message"]
        r = httpx.post(f"{url}/art/v1/models/register", json={"name": "x", "base_model": "y"})
        assert r.status_code == 401  # the training API too
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200  # health stays open, it tells nothing
    finally:
        server.kill()


def test_the_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from art_train import ModelService, create_app

    calls: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return compare(a, b)

    monkeypatch.setattr("art_train.server.hmac.compare_digest", spy)
    with TestClient(create_app(ModelService(path=tmp_path), api_key="k3y")) as http:
        assert http.get("/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert http.get("/v1/models", headers={"Authorization": "Bearer k3y"}).status_code == 200
    assert calls == [(b"nope", b"k3y"), (b"k3y", b"k3y")]  # every check goes through compare_digest


def test_request_size_is_limited_with_and_without_content_length(served: Served) -> None:
    big = json.dumps({"model": "rel", "messages": [{"role": "user", "content": "x" * (3 * 2**20)}]}).encode()

    def chunks():
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    for content in (big, chunks()):  # a declared length, and a chunked body that must be counted
        r = httpx.post(f"{served.url}/v1/chat/completions", content=content,
                       headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert_still_serving(served.url)


@pytest.mark.parametrize("field, value", [
    ("name", "../../escape"), ("name", "a/b"), ("project", ".."), ("project", "/etc"), ("name", ".hidden"),
    ("name", "x" * 200), ("project", "a\\b"),
])
def test_model_and_project_names_cannot_leave_the_run_directory(served: Served, field: str, value: str) -> None:
    body = {"name": "ok", "project": "ok", "base_model": "smollm2-135m", "trainable": True, field: value}
    r = httpx.post(f"{served.url}/art/v1/models/register", json=body)
    assert r.status_code == 422 and "is not a valid name" in r.json()["error"]["message"]
    assert not any(p.name in {"escape", "etc"} for p in served.home.parent.rglob("*"))
    with pytest.raises(ValueError, match="not a valid name"):
        art.RunDir(value if field == "project" else "p", value if field == "name" else "n", served.home)


def test_paths_in_urls_and_splits_cannot_leave_the_run_directory(served: Served) -> None:
    for path in ("..%2F..%2Fetc", "%2e%2e", "rel%2F..%2F..%2Fx"):
        r = httpx.get(f"{served.url}/art/v1/models/{path}/step")
        assert r.status_code == 404, r.text
        assert "Not Found" in r.json()["error"]["message"] or "is not registered" in r.json()["error"]["message"]
    r = httpx.post(f"{served.url}/art/v1/models/rel/log", json={"groups": [], "split": "../../x"})
    assert r.status_code == 400 and "not a valid name" in r.json()["error"]["message"]
    assert_still_serving(served.url)


def test_adapters_load_only_from_the_run_directory(served: Served, tmp_path: Path) -> None:
    rundir = served.home / "reliability" / "models" / "rel"
    outside = tmp_path / "planted"
    shutil.copytree(rundir / "checkpoints" / "0000", outside)
    (rundir / "checkpoints" / "0777").symlink_to(outside)  # a checkpoint that points out of the run directory
    try:
        r = httpx.post(f"{served.url}/v1/chat/completions", json={"model": "rel@777", "messages": HI, "max_tokens": 1})
        assert r.status_code == 403, r.text
        message = r.json()["error"]["message"]
        assert "outside the run directory" in message and "only from the model's own checkpoints" in message
    finally:
        (rundir / "checkpoints" / "0777").unlink()
    assert_still_serving(served.url)


class _Payload:
    """Unpickling this runs code: it creates a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (Path.touch, (self.marker,))


def test_optimizer_state_is_never_unpickled(tiny_model_path: Path, tmp_path: Path) -> None:
    from art_train.trainer import Trainer

    model = art.TrainableModel(name="pkl", project="sec", base_model=str(tiny_model_path))
    rundir = art.RunDir("sec", "pkl", tmp_path)
    Trainer(model, rundir)  # writes checkpoint 0 with its optimizer state
    marker = tmp_path / "code-ran"
    with open(rundir.checkpoint_path(0) / "optimizer.pt", "wb") as f:
        pickle.dump({"state": {}, "param_groups": [], "x": _Payload(marker)}, f)
    with pytest.raises(Exception) as info:  # noqa: PT011 - the message is what is checked
        Trainer(model, rundir)
    assert not marker.exists()  # the payload never ran
    assert "optimizer.pt" in str(info.value) and "weights_only" in str(info.value)
