"""Fixtures every test directory can use: the environment for offline runs and the tiny random model."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init tiny Llama (hidden 64, 2 layers) with the SmolLM2 tokenizer, built once per session."""
    from art_train.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-llama")


# The quick tier (`scripts/test.sh --quick`, CONTRIBUTING.md) runs the tests not marked `slow`, `vllm` or
# `heavy`. A test is `heavy` when it is marked so, or when it uses one of these fixtures: each loads the tiny
# model or starts a real server, seconds to tens of seconds a test on a 2-core machine.
HEAVY_FIXTURES = {"tiny_model_path", "tiny_tokenizer", "tiny_family", "art_serve", "served", "run"}


# scripts/test.sh runs the tests in parallel (pytest-xdist, `--dist loadgroup`, one worker per core). Each
# worker builds its own session fixtures, so the tests sharing an expensive one run on one worker: a
# group per such fixture (and its conftest's directory), and a group per module for the rest (module
# fixtures). The `vllm` tests form one group, one vLLM process at a time: each binds every core.
SHARED_FIXTURES = {"art_serve", "served", "run"}


def xdist_group(item: pytest.Item) -> str:
    if item.get_closest_marker("vllm") is not None:
        return "vllm"
    info = getattr(item, "_fixtureinfo", None)
    for name in sorted(SHARED_FIXTURES & set(getattr(item, "fixturenames", ()))):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs and defs[-1].scope == "session":
            return f"{name}:{defs[-1].baseid or '.'}"
    return item.nodeid.split("::", 1)[0]


def tag_group(item: pytest.Item, group: str) -> None:
    """What xdist does for an `xdist_group` mark: the group after an '@' in the node id, which its scheduler
    reads. xdist 3.8 sets `item._nodeid`, which pytest 9.2 no longer reads (its id is `item._id`, a NodeId
    that keeps the string it was parsed from), so the groups are set here instead of by marks."""
    tagged = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(tagged)
    else:
        item._nodeid = tagged


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.heavy)
    if config.getoption("loadgroup", False):  # an xdist worker of a `--dist loadgroup` run
        for item in items:
            tag_group(item, xdist_group(item))
    # the longest group first, so that it is not the one left running at the end (`--no-loadscope-reorder`)
    items.sort(key=lambda item: item.get_closest_marker("vllm") is None)
