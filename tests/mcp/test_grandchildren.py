"""Closing a connection or a pool leaves no process of the server's alive: a server that starts a
child (in its process group, or one that left it with its own session) loses the child too."""

from __future__ import annotations

import asyncio
import time

import pytest

import art_mcp
from tests.mcp.conftest import alive

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)


async def _gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.parametrize("detach", [False, True])
async def test_closing_a_connection_stops_the_servers_children(flaky, detach: bool) -> None:
    async with art_mcp.connect(flaky) as session:
        server = int((await session.call("whoami")).text)
        child = int((await session.call("spawn_child", {"detach": detach})).text)
        assert alive(child)
    assert await _gone(server) and await _gone(child), f"child {child} outlived the connection"


async def test_closing_a_pool_stops_every_servers_children(flaky) -> None:
    children = []
    async with art_mcp.ServerPool(flaky, isolation="per_rollout", max_processes=2) as pool:
        for _ in range(2):
            async with pool.session() as session:
                children.append(int((await session.call("spawn_child")).text))
        async with pool.session() as a, pool.session() as b:  # two live at once, closed with the pool
            children += [int((await s.call("spawn_child")).text) for s in (a, b)]
    for child in children:
        assert await _gone(child), f"child {child} outlived the pool"
