"""glibc's allocator as the backend sets it: big freed blocks leave RSS, and the settings can be turned off."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_trim")

CODE = r"""
import json, os, torch
from art_train.malloc import tune_malloc, trim_malloc
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
applied = tune_malloc()
block = torch.ones(16 << 18)
del block  # a 16 MiB block freed: glibc's own threshold now rises to 16 MiB
big, small = [], []
for _ in range(100):
    big.append(torch.ones(1 << 19))  # 2 MiB
    small.append(torch.ones(16 << 10))  # 64 KiB, kept: each sits after a big block (1 KiB ones could fill
                                        # the holes that imports left, as they did once the imports changed)
before = rss()
big.clear()
freed = before - rss()
trimmed = trim_malloc()
print(json.dumps({"applied": applied, "freed_mb": freed, "after_trim_mb": before - rss(), "trimmed": trimmed}))
"""


def _run(*args: str, code: str = CODE, **env: str) -> dict:
    given = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "ART_MALLOC_", "THP_"))}
    out = subprocess.run([sys.executable, "-c", code, *args], env={**given, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_big_blocks_are_given_back_when_freed_and_the_rest_by_a_trim() -> None:
    tuned = _run(ART_MALLOC_MMAP_MB="1")
    assert tuned["applied"].get("mmap_bytes") == 1 << 20
    assert tuned["freed_mb"] >= 150, tuned  # 200 MiB of mapped blocks leave RSS as they are freed
    glibc = _run()  # the backend's default: glibc's own threshold (it costs long rows' steps speed)
    assert glibc["applied"] == {"arenas": 2}
    assert glibc["freed_mb"] < 50, glibc  # glibc's threshold rose: the blocks sat on the heap between live ones
    assert glibc["after_trim_mb"] >= 150 and glibc["trimmed"], glibc  # malloc_trim hands them back


def test_the_environment_wins() -> None:
    assert _run(MALLOC_MMAP_THRESHOLD_="4194304", MALLOC_ARENA_MAX="4")["applied"] == {}
    assert _run(ART_MALLOC_ARENAS="0", ART_MALLOC_MMAP_MB="x")["applied"] == {}


HUGE = r"""
import json, os, sys, torch
if sys.argv[1] == "late":
    torch.ones(1 << 20)  # torch has allocated: its setting is fixed
from art_train.malloc import tune_malloc
applied = tune_malloc()
block = torch.ones(64 << 18)  # 64 MiB
huge = sum(int(line.split()[1]) for line in open("/proc/self/smaps") if line.startswith("AnonHugePages"))
print(json.dumps({"applied": applied, "huge_kb": huge}))
"""


def _huge(when: str, **env: str) -> dict:
    return _run(when, code=HUGE, **env)


THP = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.mark.skipif(not os.path.exists(THP) or "[never]" in open(THP).read(), reason="no transparent huge pages")
def test_huge_pages_for_torchs_big_blocks_when_set_before_its_first_allocation() -> None:
    on = _huge("early", ART_MALLOC_HUGE_PAGES="1")
    assert on["applied"].get("huge_pages") == 1 and on["huge_kb"] >= 32 << 10, on
    late = _huge("late", ART_MALLOC_HUGE_PAGES="1")
    assert "huge_pages" not in late["applied"], late  # said, not pretended
    off = _huge("early", ART_MALLOC_HUGE_PAGES="0")
    assert "huge_pages" not in off["applied"], off
    if "[madvise]" in open(THP).read():  # (with "always" every big mapping gets them anyway)
        assert off["huge_kb"] < 32 << 10, off
    assert "huge_pages" not in _huge("early", ART_MALLOC_HUGE_PAGES="1", THP_MEM_ALLOC_ENABLE="0")["applied"]
