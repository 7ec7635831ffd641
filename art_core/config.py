"""Configuration that crosses the wire: how to train a step, and how to set up a trainable model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LossName = Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"]


class TrainConfig(BaseModel):
    """How one `TrainableModel.train` call turns trajectory groups into a new checkpoint."""

    model_config = ConfigDict(extra="forbid")

    learning_rate: float = Field(1e-5, gt=0, description="AdamW learning rate.")
    loss: LossName = Field(
        "grpo",
        description=(
            "Policy loss: 'grpo' (PPO-style clipped ratio, per-sequence mean), 'dr_grpo' (no length or "
            "std normalisation), 'dapo' (token-level mean over the batch), 'gspo' (sequence-level "
            "importance ratio), 'cispo' (clipped importance weights, gradient through logprobs)."
        ),
    )
    epsilon: float = Field(0.2, ge=0, description="Lower clip range of the importance ratio (1 - epsilon).")
    epsilon_high: float | None = Field(
        None, ge=0, description="Upper clip range (1 + epsilon_high); defaults to `epsilon`."
    )
    beta: float = Field(0.0, ge=0, description="Weight of the k3 KL penalty to the base model (adapter off).")
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="Ratio per token, or one geometric-mean ratio per sequence (GSPO)."
    )
    truncated_importance_sampling: float | None = Field(
        None,
        gt=0,
        description=(
            "Cap C for truncated importance sampling against the sampler's logprobs: each token's "
            "loss is weighted by min(exp(logp_trainer_old - logp_sampler), C). None turns it off in sync "
            "mode and means 2.0 in async mode."
        ),
    )
    scale_rewards: bool = Field(True, description="Divide each group's advantages by the group's std.")
    num_epochs: int = Field(1, ge=1, description="Passes over the step's trajectories (gradient steps = epochs x batches).")
    batch_size: int | None = Field(
        None, ge=1, description="Trajectories per optimizer step; None puts the whole step in one optimizer step."
    )
    max_grad_norm: float | None = Field(1.0, gt=0, description="Gradient clipping norm; None disables it.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    max_seq_len: int | None = Field(None, ge=16, description="Longest sequence trained; None uses the model's config.")
    overlong: Literal["truncate", "drop"] = Field("truncate", description="What to do with longer sequences.")
    trajectory_weight: Literal["equal", "tokens"] = Field(
        "equal", description="Each trajectory weighs the same in the loss, or in proportion to its trained tokens."
    )
    pack_tokens: int | None = Field(
        None, ge=16, description="Tokens per packed row; None picks from max_seq_len."
    )
    train_unsampled_turns: bool = Field(
        False,
        description=(
            "Also train assistant turns that carry no sampled token ids (a teacher's, a hand-built chat "
            "model's): re-tokenized from their text and counted as `tokenize/retokenized_turns`. Off: they "
            "are context (`tokenize/unsampled_context_turns`), since the policy never sampled them."
        ),
    )
    mode: Literal["sync", "async"] = Field(
        "sync",
        description=(
            "'sync': the backend holds the model's inference while the step trains and serves the new step "
            "before any further request. 'async': inference goes on under the current step while this one "
            "trains, the new adapter replaces it between requests, and the step drops and corrects off-policy "
            "samples (`max_steps_off_policy`, `truncated_importance_sampling`)."
        ),
    )
    max_steps_off_policy: int | None = Field(
        None,
        ge=0,
        description=(
            "Oldest sample trained: a sample's age is the step the training starts from minus the step that "
            "sampled it (0 on-policy); older ones are dropped (not trained) and counted in `off_policy/dropped`. "
            "None: 1 in async mode, no bound in sync mode."
        ),
    )


def train_config(config: TrainConfig | None, fields: dict[str, object]) -> TrainConfig:
    """`config` with `fields` set (OpenPipe ART's ``backend.train(model, groups, learning_rate=...)``);
    an unknown field is refused by name, as `TrainConfig` refuses it."""
    if not fields:
        return config or TrainConfig()
    return TrainConfig(**{**(config.model_dump() if config is not None else {}), **fields})


class SFTConfig(BaseModel):
    """Supervised fine-tuning on assistant turns (distillation, warm-up before RL)."""

    model_config = ConfigDict(extra="forbid")

    learning_rate: float = Field(5e-5, gt=0, description="AdamW learning rate.")
    num_epochs: int = Field(1, ge=1, description="Passes over the data.")
    batch_size: int = Field(8, ge=1, description="Sequences per optimizer step.")
    max_grad_norm: float | None = Field(1.0, gt=0, description="Gradient clipping norm; None disables it.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_seq_len: int | None = Field(None, ge=16, description="Longest sequence trained.")
    overlong: Literal["truncate", "drop"] = Field("truncate", description="What to do with longer sequences.")


class VLLMConfig(BaseModel):
    """How the `vllm` engine starts vLLM: parallelism, memory and LoRA slots (`ModelConfig.vllm`).

    The defaults start vLLM as ART always has; a field left at its default adds nothing to the
    command line, so vLLM's own default applies.

    Example:
        ModelConfig(engine="vllm", vllm=VLLMConfig(tensor_parallel_size=2, gpu_memory_utilization=0.5))
    """

    model_config = ConfigDict(extra="forbid")

    tensor_parallel_size: int = Field(1, ge=1, description="GPUs (or CPU ranks) each copy of the model is split across.")
    data_parallel_size: int = Field(1, ge=1, description="Copies of the model vLLM serves behind its one port.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="Share of each GPU's memory vLLM may take (weights and KV cache); None: vLLM's 0.9."
    )
    max_loras: int = Field(4, ge=1, description="Adapters vLLM holds in one batch.")
    max_lora_rank: int | None = Field(
        None, description="Largest LoRA rank vLLM accepts, a power of two; None: `lora_rank` rounded up, at least 8."
    )
    enable_sleep_mode: bool = Field(
        False, description="Start vLLM with --enable-sleep-mode (GPU only): it can free its memory between steps."
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="More vLLM command-line arguments, appended last (vLLM takes the last of a repeated flag).",
    )

    @field_validator("max_lora_rank")
    @classmethod
    def _power_of_two(cls, rank: int | None) -> int | None:
        if rank is not None and (rank < 1 or rank & (rank - 1)):
            up = 1 << (max(rank, 1) - 1).bit_length()
            raise ValueError(f"vLLM takes a power of two for max_lora_rank, got {rank}; use {up}")
        return rank


class ModelConfig(BaseModel):
    """How the backend sets up a trainable model: the LoRA, the engine, numerics."""

    model_config = ConfigDict(extra="forbid")

    lora_rank: int = Field(8, ge=1, description="LoRA rank r.")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha (scale = alpha / r).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="Module names the LoRA wraps.",
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    recompute_mlp: bool = Field(
        False,
        description="Recompute each gated MLP's gate, up and activation in backward instead of keeping them (its "
        "input only is kept): the same gradients at less memory for more time (on CPU, an agent-shaped GRPO step "
        "at 0.75x the peak memory and 0.89x the speed). Rows still share their prompt; no effect with "
        "`gradient_checkpointing`, which recomputes whole layers.",
    )
    recompute_prompt: bool = Field(
        False,
        description="Run a prompt that several rows share forward again in backward instead of keeping its "
        "activations while its rows train: the same gradients at less memory for one more forward of each shared "
        "prompt (on CPU, an agent-shaped GRPO step at 0.77x the peak memory and 0.93x the speed). No effect with "
        "`gradient_checkpointing` (no shared prompts) or a base sharded over ranks.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype: 'auto' is bfloat16 on GPU, float32 on CPU."
    )
    autocast: Literal["bfloat16", "auto"] | None = Field(
        None,
        description="Mixed precision for training: the decoder's matmuls run in this dtype under torch.autocast "
        "while weights, LoRA and optimizer stay in `dtype` (the logprob head stays in float32). About 1.7x "
        "faster training steps on CPUs with native bfloat16 (AVX512-BF16, AMX), but dozens of times slower on "
        "CPUs without it (AVX2 only). 'auto': bfloat16 on a GPU or a CPU with native bfloat16, else none. "
        "None: no autocast.",
    )
    max_seq_len: int = Field(4096, ge=16, description="Longest sequence served or trained.")
    engine: Literal["transformers", "vllm"] = Field("transformers", description="Inference engine.")
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="How the `vllm` engine starts vLLM.")
    chat_template: str | None = Field(
        None, description="A Jinja chat template (text, or a name from TRL's chat_templates) to use instead of the tokenizer's."
    )
    tool_parser: str | None = Field(
        None, description="How tool calls are parsed from the model's text; None: the base model's family's parser (hermes when unknown)."
    )
    seed: int = Field(0, description="Seed for the LoRA's initialisation.")
    retain_checkpoints: int | None = Field(
        3,
        ge=1,
        description=(
            "After each training step keep the newest N checkpoints, step 0 (the base, for held-out "
            "comparisons) and the best by `best_checkpoint_metric`, and delete the rest; None keeps all. "
            "Resuming needs only the newest, so a run resumes after any retention."
        ),
    )
    best_checkpoint_metric: str | None = Field(
        "val/reward_mean",
        description=(
            "History metric that names the best checkpoint, higher is better: 'val/reward_mean' is the "
            "reward_mean of the split-'val' rows logged for a step. Steps never evaluated are never 'best'."
        ),
    )

    @model_validator(mode="after")
    def _lora_fits_vllm(self) -> ModelConfig:
        rank = self.vllm.max_lora_rank
        if rank is not None and rank < self.lora_rank:
            up = 1 << (self.lora_rank - 1).bit_length()
            raise ValueError(f"vllm.max_lora_rank={rank} is below lora_rank={self.lora_rank}: vLLM would refuse the "
                             f"adapter; set vllm.max_lora_rank to {up} or leave it None")
        return self
