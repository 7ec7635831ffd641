"""ART's MCP plugin: train an agent on any MCP server's tools.

- `connect(server)`: a wrapped MCP session; `openai_tools()` and `call()` (recorded in the trajectory).
- `ServerPool`: a fresh server process per rollout, or one shared, under a process bound.
- `rollout(model, session, task)`: a generic tool-using agent loop.
- `generate_tasks(...)`: AutoRL tasks from the tool schemas alone (litellm, structured output);
  `generate_scenarios(...)` is OpenPipe ART's name and signature for it.
- `generate_verified_tasks(server, n)`: tasks with rewards checked against gold runs (no LLM, no data).

Depends on `art_core`, `mcp` (1.x or 2.x: `compat.py` holds the differences) and `litellm` only
(litellm is imported when tasks are generated).
"""

from .agent import (
    COMPLETE_TASK,
    COMPLETE_TASK_TOOL,
    DEFAULT_SYSTEM_PROMPT,
    request_params,
    rollout,
    task_text,
)
from .autorl import (
    Task,
    TaskGenerationError,
    dedupe,
    generate_tasks,
    load_tasks,
    save_tasks,
    similarity,
    split_tasks,
)
from .pool import Isolation, ServerPool
from .port import GeneratedScenario, GeneratedScenarioCollection, generate_scenarios
from .schema_sample import ValuePool, sample_arguments
from .servers import bundled_server
from .session import (
    McpServerError,
    McpSession,
    ServerCrashed,
    ServerSpec,
    ServerStartError,
    ToolResult,
    connect,
    resolve_server,
    to_openai_tool,
)
from .tool_specs import openai_parameters
from .verified import (
    Call,
    NonDeterministicServer,
    StatePlan,
    VerifiedTask,
    generate_verified_tasks,
    gold_trajectory,
    load_verified_tasks,
    read_state,
    reword_tasks,
    verified_rollout,
)

__all__ = [
    "COMPLETE_TASK",
    "COMPLETE_TASK_TOOL",
    "Call",
    "DEFAULT_SYSTEM_PROMPT",
    "GeneratedScenario",
    "GeneratedScenarioCollection",
    "Isolation",
    "McpServerError",
    "McpSession",
    "NonDeterministicServer",
    "ServerCrashed",
    "ServerPool",
    "ServerSpec",
    "ServerStartError",
    "StatePlan",
    "Task",
    "TaskGenerationError",
    "ToolResult",
    "ValuePool",
    "VerifiedTask",
    "bundled_server",
    "connect",
    "dedupe",
    "generate_scenarios",
    "generate_tasks",
    "generate_verified_tasks",
    "gold_trajectory",
    "load_tasks",
    "load_verified_tasks",
    "read_state",
    "openai_parameters",
    "request_params",
    "resolve_server",
    "reword_tasks",
    "rollout",
    "sample_arguments",
    "save_tasks",
    "similarity",
    "split_tasks",
    "task_text",
    "to_openai_tool",
    "verified_rollout",
]
