"""Build the static report of one run directory: ``index.html`` plus one data file per step.

The page opens from disk (``file://``) with no server: the index carries the run's history,
checkpoints and a summary of every step; a step's trajectories sit in ``data/<split>-<step>.js``
and are loaded (a ``<script>`` tag, which works from disk where ``fetch`` does not) only when the
step is opened. So a run of 10,000 trajectories opens as fast as a run of ten.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from art_core import RunDir, TrajectoryGroup

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).parent
MAX_CONTENT_CHARS = 20_000  # per message: a huge tool result is cut, with a note

Decoder = Callable[[list[int]], list[str]]


def _json(data: Any) -> str:
    # safe inside <script>: no "</script>" or "<!--" can end the element early
    return json.dumps(data, separators=(",", ":"), default=str).replace("<", "\\u003c")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def load_decoder(base_model: str | None) -> Decoder | None:
    """Token id -> text for the run's base model, from local files only; None when it cannot be had."""
    if not base_model:
        return None
    try:
        from transformers import AutoTokenizer

        from ..models import resolve_base_model

        tok = AutoTokenizer.from_pretrained(str(resolve_base_model(base_model)))
    except Exception as exc:  # the report still shows token ids and logprobs
        logger.warning("report: no tokenizer for %s (%s); sampled tokens are shown as ids", base_model, exc)
        return None
    cache: dict[int, str] = {}

    def decode(ids: list[int]) -> list[str]:
        missing = [i for i in dict.fromkeys(ids) if i not in cache]
        for i, text in zip(missing, tok.batch_decode([[i] for i in missing]), strict=True):
            cache[i] = text
        return [cache[i] for i in ids]

    return decode


def _message(m: dict[str, Any], decode: Decoder | None) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.get("role")}
    content = m.get("content")
    if isinstance(content, list):  # content parts: keep the text
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if isinstance(content, str) and len(content) > MAX_CONTENT_CHARS:
        content = content[:MAX_CONTENT_CHARS] + f"\n[... {len(content) - MAX_CONTENT_CHARS} more characters cut]"
    if content:
        out["content"] = content
    for key in ("name", "tool_call_id"):
        if m.get(key):
            out[key] = m[key]
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
             "arguments": (c.get("function") or {}).get("arguments")}
            for c in m["tool_calls"]
        ]
    sample = m.get("sample")
    if sample:
        ids = list(sample.get("token_ids") or [])
        out["sample"] = {
            "ids": ids,
            "text": decode(ids) if decode else None,
            "logprobs": [round(x, 4) for x in sample["logprobs"]] if sample.get("logprobs") else None,
            "step": sample.get("step"),
            "node": sample.get("node"),
        }
    return out


def _advantages(groups: list[TrajectoryGroup]) -> list[list[float | None]]:
    try:
        from ..trainer.advantages import step_advantages

        return [[round(a, 4) for a in g.advantages] for g in step_advantages(groups)]
    except Exception:  # pragma: no cover - only without torch
        return [[None] * len(g.trajectories) for g in groups]


def step_data(groups: list[TrajectoryGroup], decode: Decoder | None) -> dict[str, Any]:
    """What the viewer needs of one step: groups -> trajectories -> histories -> messages."""
    advantages = _advantages(groups)
    out = []
    for gi, g in enumerate(groups):
        trajs = []
        for ti, t in enumerate(g.trajectories):
            histories = [{"messages": [_message(m, decode) for m in h.turns], "tools": len(h.tools or [])}
                         for h in t.histories()]
            trajs.append({
                "id": t.id, "reward": t.reward, "advantage": advantages[gi][ti] if ti < len(advantages[gi]) else None,
                "metrics": {k: _finite(v) for k, v in t.metrics.items()}, "metadata": t.metadata, "logs": t.logs,
                "histories": histories,
            })
        out.append({"index": gi, "metadata": g.metadata, "metrics": {k: _finite(v) for k, v in g.metrics.items()},
                    "logs": g.logs, "exceptions": [{"type": e.type, "message": e.message} for e in g.exceptions],
                    "trajectories": trajs})
    return {"groups": out}


def _step_files(rundir: RunDir) -> list[tuple[str, int, Path]]:
    root = rundir.path / "trajectories"
    found = []
    if root.exists():
        for split_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            for f in sorted(split_dir.glob("*.jsonl")):
                if f.stem.isdigit():
                    found.append((split_dir.name, int(f.stem), f))
    return found


def build_report(run_dir: str | os.PathLike[str], output: str | os.PathLike[str] | None = None, *,
                 tokens: bool = True) -> Path:
    """Write the report of `run_dir` (a model's run directory) to `output` (default ``run_dir/report``).

    Returns the path of ``index.html``. With `tokens`, sampled token ids are decoded with the base
    model's tokenizer when it is on this machine.

    Example:
        path = build_report(".art/email/models/agent-001")   # open it in a browser
    """
    path = Path(run_dir)
    if not (path / "model.json").exists() and not (path / "history.jsonl").exists():
        raise FileNotFoundError(
            f"{path} is not a run directory (no model.json or history.jsonl); pass "
            "<ART_HOME>/<project>/models/<name>, e.g. .art/demo/models/demo-1")
    rundir = RunDir(path.parent.parent.name, path.name, path.parent.parent.parent)
    out = Path(output) if output is not None else path / "report"
    (out / "data").mkdir(parents=True, exist_ok=True)
    info = rundir.read_model() or {}
    decode = load_decoder(info.get("base_model")) if tokens else None

    steps: list[dict[str, Any]] = []
    for split, step, file in _step_files(rundir):
        groups = [TrajectoryGroup.model_validate_json(line) for line in file.read_text().splitlines() if line.strip()]
        rewards = [t.reward for g in groups for t in g.trajectories]
        key = f"{split}-{step:04d}"
        (out / "data" / f"{key}.js").write_text(f"ART_STEP({_json(key)},{_json(step_data(groups, decode))});\n")
        steps.append({"key": key, "split": split, "step": step, "groups": len(groups), "trajectories": len(rewards),
                      "exceptions": sum(len(g.exceptions) for g in groups),
                      "reward_mean": statistics.fmean(rewards) if rewards else None,
                      "reward_min": min(rewards, default=None), "reward_max": max(rewards, default=None)})
    history = [{k: _finite(v) for k, v in row.items() if isinstance(v, (int, float, str, bool)) or v is None}
               for row in rundir.read_history()]
    index = {"model": {k: info.get(k) for k in ("name", "project", "base_model")} | {"name": info.get("name", path.name)},
             "history": history, "checkpoints": rundir.checkpoint_steps(), "steps": steps,
             "tokens_decoded": decode is not None}
    page = (ASSETS / "index.html").read_text()
    page = page.replace("/*ART_CSS*/", (ASSETS / "report.css").read_text())
    page = page.replace("/*ART_JS*/", (ASSETS / "report.js").read_text())
    page = page.replace("/*ART_INDEX*/null", _json(index))
    (out / "index.html").write_text(page)  # last: a reader never sees an index without its data
    logger.info("report: %d steps, %d trajectories -> %s", len(steps), sum(s["trajectories"] for s in steps), out)
    return out / "index.html"
