"""ART's client side: trajectories, models, gathering rollouts, held-out evaluation, the run directory.

Importing it never imports torch, transformers, langchain, mcp or litellm.
"""

from .backend import Backend, Registration, TrainResult
from .capture import (
    capture,
    current_trajectory,
    node,
    record_completion,
    record_tool_result,
    sample_from_choice,
)
from .config import ModelConfig, SFTConfig, TrainConfig, VLLMConfig
from .dataset import DatasetBatch, iterate_dataset
from .evaluation import Comparison, EvalResult, PeriodicEval, compare, evaluate
from .gather import TooManyExceptions, gather_trajectories, gather_trajectory_groups, trajectory_group_batches
from .metrics import group_metrics
from .model import Model, TrainableModel
from .openai_capture import CapturingTransport
from .pipeline import PipelineTrainer
from .remote import BackendError, RemoteBackend
from .retry import retry
from .rundir import RunDir, atomic_write_bytes, atomic_write_text
from .sft_data import (
    SFTBatch,
    SFTDataError,
    iterate_sft,
    learning_rate_at,
    load_sft_jsonl,
    mask_turns,
    validate_sft_record,
    write_sft_jsonl,
)
from .trajectory import (
    History,
    RolloutError,
    Sample,
    Trajectory,
    TrajectoryGroup,
    assistant_turn,
    message_sample,
)

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendError",
    "CapturingTransport",
    "Comparison",
    "DatasetBatch",
    "EvalResult",
    "History",
    "Model",
    "ModelConfig",
    "PeriodicEval",
    "PipelineTrainer",
    "Registration",
    "RemoteBackend",
    "RolloutError",
    "RunDir",
    "SFTBatch",
    "SFTConfig",
    "SFTDataError",
    "Sample",
    "TooManyExceptions",
    "TrainConfig",
    "TrainResult",
    "TrainableModel",
    "Trajectory",
    "TrajectoryGroup",
    "VLLMConfig",
    "__version__",
    "assistant_turn",
    "atomic_write_bytes",
    "atomic_write_text",
    "capture",
    "compare",
    "current_trajectory",
    "evaluate",
    "gather_trajectories",
    "gather_trajectory_groups",
    "group_metrics",
    "iterate_dataset",
    "iterate_sft",
    "learning_rate_at",
    "load_sft_jsonl",
    "mask_turns",
    "message_sample",
    "node",
    "record_completion",
    "record_tool_result",
    "retry",
    "sample_from_choice",
    "trajectory_group_batches",
    "validate_sft_record",
    "write_sft_jsonl",
]
