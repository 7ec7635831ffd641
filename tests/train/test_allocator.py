"""tcmalloc / jemalloc preloaded by re-running the program (art_train/allocator.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from art_train import allocator

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and glibc's dladdr")

CODE = r"""
import json, os, subprocess, sys
from art_train.allocator import malloc_library, preload_allocator
lib = preload_allocator()
import torch
from art_train.malloc import trim_malloc, tune_malloc
torch.ones(64 << 18).sum()  # 64 MiB through torch's CPU allocator
child = subprocess.run([sys.executable, "-c", "import os; from art_train.allocator import malloc_library; "
                        "print(os.environ.get('LD_PRELOAD'), malloc_library())"], capture_output=True, text=True)
print(json.dumps({"lib": lib, "malloc": malloc_library(), "argv": sys.argv[1:], "preload": os.environ.get("LD_PRELOAD"),
                  "tuned": tune_malloc(), "trimmed": trim_malloc(), "child": child.stdout.split()}))
"""


def _run(**env: str) -> dict:
    given = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.ENV)}
    out = subprocess.run([sys.executable, "-c", CODE, "a", "--b"], env={**given, **env}, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["tcmalloc", "jemalloc"])
def test_the_program_reruns_with_it_preloaded_and_its_children_start_without_it(name: str) -> None:
    lib = allocator.find_allocator(name)
    if lib is None:
        pytest.skip(f"{name} is not installed here (jemalloc comes with the ray extra)")
    out = _run(ART_MALLOC=name)
    assert out["lib"] == lib and out["malloc"] == lib, out  # malloc now comes from it
    assert out["argv"] == ["a", "--b"], out  # the same program, the same arguments
    assert out["preload"] is None, out  # taken out again once started
    assert out["child"] == ["None", out["child"][1]] and name not in out["child"][1], out  # a child gets glibc's
    assert out["tuned"] == {} and out["trimmed"] is True, out  # glibc's settings left alone; its own trim used


def test_glibc_leaves_malloc_alone() -> None:
    out = _run(ART_MALLOC="Glibc")  # any case
    assert out["lib"] is None and "libc" in Path(out["malloc"]).name, out
    assert out["tuned"] == {"arenas": 2}, out


def test_auto_takes_tcmalloc_then_jemalloc_then_ray_s_jemalloc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ray_lib = tmp_path / "ray" / "core" / "libjemalloc.so"
    ray_lib.parent.mkdir(parents=True)
    ray_lib.touch()
    monkeypatch.setattr(allocator, "_DIRS", (str(tmp_path),))
    monkeypatch.setattr(allocator, "_ray_jemalloc", lambda: None)
    assert allocator.find_allocator("auto") is None
    monkeypatch.setattr(allocator, "_ray_jemalloc", lambda: ray_lib)
    assert allocator.find_allocator("auto") == str(ray_lib)
    (tmp_path / "libjemalloc.so.2").touch()
    assert allocator.find_allocator("auto") == str(tmp_path / "libjemalloc.so.2")
    (tmp_path / "libtcmalloc_minimal.so.4").touch()
    assert allocator.find_allocator("auto") == str(tmp_path / "libtcmalloc_minimal.so.4")
    assert allocator.find_allocator("jemalloc") == str(tmp_path / "libjemalloc.so.2")
    assert allocator.find_allocator(str(ray_lib)) == str(ray_lib)
    assert allocator.find_allocator(str(tmp_path / "missing.so")) is None


def test_a_bad_choice_names_the_setting_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"ART_MALLOC='tcmaloc': use auto, tcmalloc, jemalloc, glibc"):
        allocator.find_allocator("tcmaloc")
    art = Path(sys.executable).with_name("art")
    if not art.exists():
        pytest.skip("the art script is not installed next to this Python")
    out = subprocess.run([str(art), "demo", "--help"], env={**os.environ, "ART_MALLOC": "tcmaloc"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "ART_MALLOC='tcmaloc'" in out.stderr, out
