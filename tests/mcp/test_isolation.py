"""Per-rollout isolation with file-backed servers (issue 14): each rollout its own directory.

Before, every fresh process opened the same database file in the same working directory, so 8 of
8 rollouts saw the others' rows. mcp-server-sqlite needs mcp 1.x: its test runs in .venv-mcp1.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path

import pytest

import art_mcp

pytestmark = pytest.mark.heavy  # left out of the quick tier: seconds a test (CONTRIBUTING.md)

MCP2 = importlib.util.find_spec("mcp.server.mcpserver") is not None

ROWS = [sys.executable, str(Path(__file__).with_name("file_server.py"))]


async def _rollout(pool: art_mcp.ServerPool, i: int) -> tuple[list[str], dict[str, str]]:
    """List the rows this rollout can see, then add its own."""
    async with pool.session() as session:
        seen = (await session.call("list_rows")).structured["result"]
        await session.call("add_row", {"text": f"rollout {i}"})
        where = (await session.call("where")).structured
        where["workdir"] = getattr(session, "workdir", None)
        return seen, where


async def test_per_rollout_gives_a_file_backed_server_a_clean_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the old behaviour: every process would open tmp_path/rows.sqlite
    async with art_mcp.ServerPool(ROWS, isolation="per_rollout", max_processes=4) as pool:
        results = await asyncio.gather(*(_rollout(pool, i) for i in range(8)))
    assert [seen for seen, _ in results] == [[]] * 8  # before: rollout k saw the k rows before it
    assert all(where["env"] == where["workdir"] == where["cwd"] for _, where in results)
    dirs = {where["cwd"] for _, where in results}
    assert len(dirs) == 8 and all(Path(where["db"]).parent == Path(where["cwd"]) for _, where in results)
    assert not any(os.path.exists(d) for d in dirs)  # removed after each rollout
    assert not (tmp_path / "rows.sqlite").exists()


async def test_rollout_dir_placeholder_and_factory(tmp_path):
    placeholder = [*ROWS, "--db", "{rollout_dir}/sub.sqlite"]
    factory_dirs: list[str] = []

    def factory(rollout_dir: str) -> list[str]:
        factory_dirs.append(rollout_dir)
        return [*ROWS, "--db", os.path.join(rollout_dir, "made.sqlite")]

    for spec, name in [(placeholder, "sub.sqlite"), (factory, "made.sqlite")]:
        async with art_mcp.ServerPool(spec, max_processes=2) as pool:
            results = [await _rollout(pool, i) for i in range(2)]
        assert [seen for seen, _ in results] == [[], []]
        assert all(Path(w["db"]) == Path(w["cwd"]) / name for _, w in results)
    assert len(factory_dirs) == 2 and not any(os.path.exists(d) for d in factory_dirs)


async def test_a_spec_with_its_own_cwd_keeps_it_and_shared_keeps_state(tmp_path):
    from mcp.client.stdio import StdioServerParameters

    own = StdioServerParameters(command=ROWS[0], args=ROWS[1:], cwd=str(tmp_path))
    async with art_mcp.ServerPool(own, max_processes=2) as pool:
        results = [await _rollout(pool, i) for i in range(2)]
    # the user chose the directory: both processes share its file (documented as not isolated)
    assert [seen for seen, _ in results] == [[], ["rollout 0"]]
    assert results[0][1]["db"] == str(tmp_path / "rows.sqlite")

    async with art_mcp.ServerPool(ROWS, isolation="shared") as pool:
        results = [await _rollout(pool, i) for i in range(3)]
    assert [seen for seen, _ in results] == [[], ["rollout 0"], ["rollout 0", "rollout 1"]]
    assert not os.path.exists(results[0][1]["cwd"])  # the shared directory goes when the pool closes


@pytest.mark.skipif(MCP2, reason="mcp-server-sqlite needs mcp 1.x; this runs in .venv-mcp1 (scripts/setup_mcp1.sh)")
async def test_mcp_server_sqlite_rollouts_do_not_see_each_other(tmp_path, monkeypatch):
    pytest.importorskip("mcp_server_sqlite")
    monkeypatch.chdir(tmp_path)
    sqlite = [sys.executable, "-c", "from mcp_server_sqlite import main; main()"]  # default ./sqlite_mcp_server.db

    async def rollout(pool: art_mcp.ServerPool, i: int) -> str:
        async with pool.session() as session:
            await session.call("create_table", {"query": "CREATE TABLE IF NOT EXISTS t (x TEXT)"})
            seen = (await session.call("read_query", {"query": "SELECT x FROM t"})).text
            await session.call("write_query", {"query": f"INSERT INTO t VALUES ('rollout {i}')"})
            return seen

    async with art_mcp.ServerPool(sqlite, isolation="per_rollout", max_processes=4) as pool:
        seen = await asyncio.gather(*(rollout(pool, i) for i in range(8)))
    assert all("rollout" not in s for s in seen), seen
    assert not (tmp_path / "sqlite_mcp_server.db").exists()
