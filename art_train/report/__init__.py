"""`art report RUN_DIR`: a static HTML report of a training run (curves, steps, trajectory viewer)."""

from __future__ import annotations

import argparse
import logging
import webbrowser

from .build import build_report, load_decoder, step_data

__all__ = ["add_parser", "build_report", "load_decoder", "report_main", "step_data"]

logger = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``art report`` subcommand."""
    p = sub.add_parser("report", help="write a static HTML report of a run directory (opens from disk)")
    p.add_argument("run_dir", help="a model's run directory, e.g. .art/<project>/models/<name>")
    p.add_argument("--output", default=None, help="folder for index.html and data/ (default RUN_DIR/report)")
    p.add_argument("--no-tokens", action="store_true", help="do not decode sampled tokens with the tokenizer")
    p.add_argument("--open", action="store_true", help="open the report in a browser")
    return p


def report_main(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    try:
        path = build_report(args.run_dir, args.output, tokens=not args.no_tokens)
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    console.print(f"report: {path}")
    if args.open:
        webbrowser.open(path.resolve().as_uri())
    return 0
