"""The observability modules' public names, and that none of their libraries load with art_core."""

import subprocess
import sys


def test_surfaces_are_pinned() -> None:
    from art_core import cli_logging, loggers, tracing
    from art_train import prometheus, report

    assert sorted(loggers.__all__) == ["LOGGERS", "MLflowLogger", "MetricsLogger", "MissingExtra", "Reporter",
                                       "TensorBoardLogger", "WandbLogger", "flat_metrics", "register_logger"]
    assert sorted(tracing.__all__) == ["disable_tracing", "enable_tracing", "trace_trajectory", "tracing_enabled"]
    assert sorted(cli_logging.__all__) == ["pop_verbose", "setup_cli_logging"]
    assert sorted(prometheus.__all__) == ["ServerMetrics", "install_metrics"]
    assert sorted(report.__all__) == ["add_parser", "build_report", "load_decoder", "report_main", "step_data"]


def test_import_art_core_loads_no_observability_library() -> None:
    code = ("import sys, art_core, art_core.tracing, art_core.loggers, art_core.cli_logging; "
            "bad = [m for m in ('wandb', 'mlflow', 'tensorboard', 'opentelemetry', 'prometheus_client', 'torch') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
