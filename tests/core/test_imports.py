import subprocess
import sys

import art_core


def test_art_core_imports_no_heavy_dependency():
    code = (
        "import art_core, sys; "
        "heavy = [m for m in ('torch', 'transformers', 'langchain_core', 'langgraph', 'mcp', 'litellm') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_package_imports_ray_unless_a_gather_asks():
    code = (
        "import sys, art_core, art_core.ray_gather, art_train, art_train.service, art_train.engines.vllm_engine, "
        "art_graph, art_mcp, ruler; assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_art_core_public_surface_is_pinned():
    assert sorted(art_core.__all__) == sorted([
        "Backend", "BackendError", "CapturingTransport", "DatasetBatch", "History", "Model", "ModelConfig",
        "Registration", "RemoteBackend", "RolloutError", "RunDir", "SFTConfig", "Sample", "TooManyExceptions",
        "TrainConfig", "TrainResult", "TrainableModel", "Trajectory", "TrajectoryGroup", "__version__",
        "assistant_turn", "atomic_write_bytes", "atomic_write_text", "capture", "current_trajectory",
        "gather_trajectories", "gather_trajectory_groups", "group_metrics", "iterate_dataset", "message_sample",
        "node", "record_completion", "record_tool_result", "retry", "sample_from_choice",
        "Comparison", "EvalResult", "PeriodicEval", "compare", "evaluate",  # held-out evaluation
        "PipelineTrainer",  # rollouts overlapping training (art_core.pipeline)
        "trajectory_group_batches",  # OpenPipe ART's pipelined loop
        "SFTBatch", "SFTDataError", "iterate_sft", "learning_rate_at", "load_sft_jsonl", "mask_turns",
        "validate_sft_record", "write_sft_jsonl",  # SFT data files (art_core.sft_data)
        "VLLMConfig",  # ModelConfig.vllm: how the vllm engine starts vLLM
    ])
    for name in art_core.__all__:
        assert hasattr(art_core, name), name
