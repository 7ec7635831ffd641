"""The `art` command: `art serve`, `art demo`, `art eval`, `art autorl`, `art --version`."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from typing import Any

from rich.console import Console

__all__ = ["autorl", "build_parser", "main", "serve"]

console = Console(stderr=True)


def _count(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _positive(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .config import BackendConfig  # pydantic only: no torch at parse time

    parser = argparse.ArgumentParser(prog="art", description="ART, the Agent Reinforcement Trainer")
    parser.add_argument("--version", action="version", version=f"art {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="show dependencies' logs, progress bars and warnings (accepted after the command too)")
    sub = parser.add_subparsers(dest="command")

    s = sub.add_parser("serve", help="serve and train models over HTTP (OpenAI-compatible /v1 + training API)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=7999, help="port (default 7999)")
    s.add_argument("--api-key", default=os.environ.get("ART_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (required off loopback; env ART_API_KEY)")
    s.add_argument("--engine", choices=["transformers", "vllm"], default=None,
                   help="inference engine for every model (default: each model's config.engine)")
    s.add_argument("--path", default=None, help="run-directory root (default ART_HOME or ./.art)")
    s.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda")
    s.add_argument("--vllm-python", default=None, help="interpreter with vLLM installed (env ART_VLLM_PYTHON)")
    s.add_argument("--engine-dtype", choices=["auto", "float32", "bfloat16", "float16"], default=None,
                   help="weights' dtype in the transformers engine (default: each model's config.dtype; 'auto' is "
                        "bfloat16 on GPUs and on CPUs with native bfloat16, else float32)")
    s.add_argument("--sync-probe-tokens", type=_count, default=BackendConfig.model_fields["sync_probe_tokens"].default,
                   help="trained tokens in each step's weight-sync probe (default %(default)s; 0: fixed probe and identity only)")
    s.add_argument("--train-procs", type=_positive, default=1,
                   help="trainer ranks (default 1): N > 1 starts N-1 more processes in one torch.distributed group "
                        "(gloo on CPU, NCCL on CUDA) that share each step's rows")
    s.add_argument("--train-shard", choices=["fsdp"], default=None,
                   help="with --train-procs N > 1: 'fsdp' keeps 1/N of the frozen base weights on each rank (FSDP2), "
                        "for a base that does not fit one device (default: each rank holds it whole)")
    s.add_argument("--replicas", type=_positive, default=1,
                   help="engine replicas behind the endpoint, each its own process (default 1: one engine in this "
                        "process, or one vLLM server); see docs/serving.md, 'Replicas'")
    s.add_argument("--replica-devices", nargs="+", default=None, metavar="DEVICES",
                   help="with --replicas N: the GPUs each replica sees, one CUDA_VISIBLE_DEVICES value per replica "
                        "(e.g. --replica-devices 4,5 6,7), so inference runs on GPUs the trainer ranks do not use")
    s.add_argument("--ray", action="store_true",
                   help="start the --replicas and trainer ranks 2..N of --train-procs as Ray actors (placed by Ray; "
                        "RAY_ADDRESS joins a cluster) instead of local processes; see docs/scaling.md")
    s.add_argument("--max-request-mb", type=float, default=256,
                   help="largest request body accepted, in MB (default 256); larger ones get a 413")
    s.add_argument("--log-level", default="info")

    d = sub.add_parser("demo", help="train smollm2-135m to add two-digit numbers; held-out accuracy before and after")
    d.add_argument("--steps", type=int, default=None, help="training steps (default fits ~10 minutes on 2 CPU cores)")
    d.add_argument("--output", default="art-demo", help="folder for the run directory and reward-curve PNG")
    d.add_argument("--model", default="smollm2-135m", help="base model (HF id, local folder or alias)")
    d.add_argument("--groups", type=int, default=None, help="prompts per step")
    d.add_argument("--group-size", type=int, default=None, help="rollouts per prompt")
    d.add_argument("--learning-rate", type=float, default=None)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--task", choices=["addition", "brevity"], default="addition",
                   help="addition (reward: the sum is right) or brevity (reward: a short reply)")
    d.add_argument("--eval-split", choices=["test", "dev"], default="test",
                   help="held-out questions to score: test (reported) or dev (for choosing settings)")
    d.add_argument("--eval-every", type=int, default=0, help="also score the held-out split every N steps")
    d.add_argument("--temperature", type=float, default=None, help="sampling temperature of the training rollouts")

    from .eval_cli import add_eval_parser

    add_eval_parser(sub)

    from .report import add_parser as add_report_parser

    add_report_parser(sub)

    sub.add_parser("autorl", help="generate tasks from an MCP server's tools and train on them (art_mcp)",
                   add_help=False)
    return parser


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .config import BackendConfig
    from .server import create_app
    from .service import ModelService
    from .threads import use_fresh_threads

    if not _loopback(args.host) and not args.api_key:
        console.print(f"[red]--host {args.host} is reachable from other machines: pass --api-key KEY "
                      "(or set ART_API_KEY), or bind 127.0.0.1[/red]")
        return 2
    service = ModelService(BackendConfig(path=args.path, engine=args.engine, device=args.device, port=args.port,
                                         vllm_python=args.vllm_python, engine_dtype=args.engine_dtype,
                                         sync_probe_tokens=args.sync_probe_tokens, train_procs=args.train_procs,
                                         train_shard=args.train_shard, replicas=args.replicas,
                                         replica_devices=args.replica_devices,
                                         replica_launcher="ray" if args.ray else "local",
                                         train_launcher="ray" if args.ray else "local"))
    app = create_app(service, api_key=args.api_key, max_body_bytes=int(args.max_request_mb * 2**20))

    @app.on_event("startup")
    async def _threads() -> None:
        use_fresh_threads()  # no OpenMP pool outlives the trainer call that made it (threads.py)

    @app.on_event("shutdown")
    async def _close() -> None:
        await service.close()

    console.print(f"art serve: OpenAI endpoint http://{args.host}:{args.port}/v1 and training API /art/v1")
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def autorl(argv: list[str]) -> int:
    """`art autorl`: art_mcp's zero-data run, composed here with its backend and RULER as the judge.

    The plugins import only art_core, so this is where they meet the bundled backend: art_mcp's CLI
    gets the backend (`LocalBackend`, or `RemoteBackend` for ``--backend URL``) and the scorer (RULER)
    from these two functions. With ``--judge self`` art_mcp registers the base model on that backend
    and hands the scorer the registered `Model`, which RULER reaches through its served endpoint.
    """
    from art_mcp.cli import autorl_main  # plugins are imported only when their command runs

    return int(autorl_main(argv, make_backend=_autorl_backend, make_scorer=_ruler_scorer) or 0)


def _autorl_backend(args: argparse.Namespace) -> Any:
    if args.backend:
        from art_core import RemoteBackend

        return RemoteBackend(args.backend, api_key=args.backend_api_key)
    from pathlib import Path

    from .local import LocalBackend

    return LocalBackend(path=Path(args.output) / ".art")


def _ruler_scorer(args: argparse.Namespace, judge: Any) -> Any:
    """RULER with `judge`: the --judge litellm name, or (--judge self) the served base model's `Model`."""
    import ruler

    given = {"api_base": args.judge_api_base, "api_key": args.judge_api_key, "max_tokens": args.judge_max_tokens}
    params = {k: v for k, v in given.items() if v}

    async def score(group: Any) -> Any:
        return await ruler.score_group(group, judge=judge, litellm_params=params, swallow_exceptions=True)

    return score


# the commands `art` re-runs under tcmalloc or jemalloc; `art demo` keeps glibc's with a 1 MiB mmap threshold
# (3.69 GB peak against 4.12 GB under tcmalloc, docs/serving.md) unless ART_MALLOC is set
LOADS_MODEL = {"serve", "eval", "autorl"}


def main(argv: list[str] | None = None) -> int:
    from art_core.cli_logging import pop_verbose, setup_cli_logging

    command = sys.argv[1] if argv is None and len(sys.argv) > 1 else None
    from .allocator import ENV as MALLOC_ENV

    if command in LOADS_MODEL or (command == "demo" and MALLOC_ENV in os.environ):
        from .allocator import preload_allocator

        try:
            preload_allocator()  # re-runs `art` with tcmalloc or jemalloc where installed (art_train/allocator.py)
        except ValueError as exc:  # a bad ART_MALLOC
            print(f"art: {exc}", file=sys.stderr)  # noqa: T201
            return 2
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "autorl":  # it has its own -v/--verbose
        setup_cli_logging(bool({"-v", "--verbose"} & set(argv)))
        return autorl(argv[1:])
    argv, verbose = pop_verbose(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_cli_logging(verbose, level=args.log_level if args.command == "serve" else None)
    if args.command == "serve":
        return serve(args)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    if args.command == "report":
        from .report import report_main

        return report_main(args)
    if args.command == "eval":
        from .eval_cli import run_eval

        return run_eval(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
