"""Logging for ART's command-line tools: ART's own progress, not its dependencies' noise.

By default (`setup_cli_logging()`): warnings and errors only, through rich; transformers' and
huggingface_hub's progress bars (weight loading, shard writing) off; FutureWarning and
DeprecationWarning hidden, and the UserWarnings that torch, transformers, peft and trl print on
every run. ART's own progress bars (rollouts, training phases with an ETA, the adapter swap)
are drawn by rich and stay. ``--verbose`` (`setup_cli_logging(verbose=True)`) brings everything
back: INFO logs from every library, their progress bars and warnings.

Nothing is patched: only environment defaults (read by those libraries when they load) and their
public verbosity switches when they are already loaded.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

__all__ = ["pop_verbose", "setup_cli_logging"]

NOISY = ("torch", "transformers", "peft", "trl", "accelerate", "huggingface_hub", "tokenizers")
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' tqdm bars follow this too
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def pop_verbose(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--verbose`` (accepted anywhere on the line), and whether it was there."""
    rest = [a for a in argv if a != "--verbose"]
    return rest, len(rest) != len(argv)


def setup_cli_logging(verbose: bool = False, level: str | int | None = None) -> None:
    """Configure logging and warnings for a CLI run (call once, at the start of `main`).

    Args:
        verbose: show everything (INFO logs, dependencies' progress bars and warnings).
        level: the log level for ART's own loggers and the root (default INFO when verbose,
            else WARNING); `art serve --log-level` passes its own.
    """
    from rich.logging import RichHandler

    chosen = level if level is not None else ("INFO" if verbose else "WARNING")
    if isinstance(chosen, str):
        chosen = chosen.upper()
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_art_cli", False):
            root.removeHandler(h)
    if sys.stderr.isatty():
        handler: logging.Handler = RichHandler(show_path=verbose, rich_tracebacks=verbose, markup=False)
    else:  # a log file or a pipe: one plain line per record, no wrapping at 80 columns
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler._art_cli = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(chosen)
    if verbose:
        for key in QUIET_ENV:
            if os.environ.get(key) == QUIET_ENV[key] and key != "TOKENIZERS_PARALLELISM":
                os.environ.pop(key)
        _transformers(verbose=True)
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    for name in NOISY:
        warnings.filterwarnings("ignore", category=UserWarning, module=rf"{name}(\.|$)")
    _transformers(verbose=False)


def _transformers(verbose: bool) -> None:
    """Apply the choice to transformers and huggingface_hub if they are already imported."""
    tf = sys.modules.get("transformers")
    if tf is not None:
        tlog = tf.utils.logging
        (tlog.enable_progress_bar if verbose else tlog.disable_progress_bar)()
        (tlog.set_verbosity_info if verbose else tlog.set_verbosity_error)()
    hub = sys.modules.get("huggingface_hub")
    if hub is not None:
        (hub.utils.enable_progress_bars if verbose else hub.utils.disable_progress_bars)()
