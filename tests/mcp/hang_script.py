"""A program that must end: a pool whose server exits at start, more rollouts than processes.

Run by tests/mcp/test_shutdown.py in a subprocess (a hang would stop the interpreter from exiting,
which no in-process test can see). argv[1]: how the rollouts run ("gather", "rollout", "asyncio").
"""

from __future__ import annotations

import asyncio
import sys

import art_mcp
from art_core import Model, TooManyExceptions, Trajectory, TrajectoryGroup, gather_trajectory_groups

EXITS_AT_START = [sys.executable, "-c", "import sys; sys.exit(3)"]


async def main(mode: str) -> None:
    model = Model(name="m", inference_base_url="http://127.0.0.1:9/v1")  # never reached
    async with art_mcp.ServerPool(EXITS_AT_START, max_processes=4) as pool:

        async def one() -> Trajectory:
            if mode == "rollout":
                return await art_mcp.rollout(model, pool, "a task")
            async with pool.session():
                return Trajectory()

        try:
            if mode == "asyncio":
                await asyncio.gather(*(one() for _ in range(8)))
            else:
                await gather_trajectory_groups([TrajectoryGroup(one() for _ in range(8))], show_progress=False)
        except (TooManyExceptions, art_mcp.ServerStartError) as exc:
            print("raised", type(exc).__name__, flush=True)
    print("pool closed", pool.live, flush=True)


asyncio.run(main(sys.argv[1]))
print("exited", flush=True)
