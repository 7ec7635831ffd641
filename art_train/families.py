"""Model families: the chat template, tool-call parser and stop tokens each one needs, and tiny
random models of each architecture for tests (built from a config, nothing downloaded).

| family | template | tool parser | turn ends with | tiny model's tokenizer |
|---|---|---|---|---|
| chatml (SmolLM2) | TRL ``qwen2_5`` | hermes | ``<|im_end|>`` | SmolLM2's |
| qwen2.5 | the model's own (Qwen's) | hermes | ``<|im_end|>`` | Qwen2.5's (from the qwen2.5-0.5b GGUF) |
| qwen3 | TRL ``qwen3`` (drops earlier reasoning) | qwen3 | ``<|im_end|>`` | Qwen2.5's plus ``<think>`` tokens |
| llama3 | TRL ``llama3_1`` | llama3_json | ``<|eot_id|>`` | stand-in: SmolLM2's plus Llama 3's special tokens |
| gptoss | ART ``gptoss`` (harmony) | harmony | ``<|return|>`` / ``<|call|>`` | stand-in: SmolLM2's plus harmony's tokens |
| gemma3 | ART ``gemma3`` (tools by prompt) | gemma3 | ``<end_of_turn>`` | Gemma 3's (from the gemma3-270m GGUF) |

No Llama 3 or GPT-OSS tokenizer installs offline here, so their tiny models use SmolLM2's with
the family's special tokens added: the template, the parser and the stop tokens are the family's,
the sub-word splits are not.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FAMILIES", "Family", "apply_family", "build_family_model", "family_for_template", "family_tokenizer"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    name: str
    template: str | None  # an ART or TRL template name; None: the tokenizer's own
    tool_parser: str
    tool_format: str  # for docs/models.md
    turn_end: str  # the token an assistant turn ends with: the tokenizer's eos for training
    stop_tokens: tuple[str, ...]  # every token that ends generation
    vllm_tool_parser: str | None  # vLLM's --tool-call-parser for this format (None: vLLM has none)
    tokenizer: str  # "smollm2", "qwen" or "gemma3": where a tiny model's tokenizer comes from
    added_tokens: tuple[str, ...] = ()  # special tokens a stand-in tokenizer needs
    bos: str | None = None  # bos token to set on a stand-in tokenizer
    model_type: str = "llama"  # transformers' model_type of the tiny model


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("chatml", None, "hermes", "Hermes <tool_call> JSON (TRL qwen2_5 template)", "<|im_end|>",
               ("<|im_end|>",), "hermes", "smollm2"),
        Family("qwen2.5", None, "hermes", "Hermes <tool_call> JSON; bare JSON accepted", "<|im_end|>",
               ("<|im_end|>", "<|endoftext|>"), "hermes", "qwen", model_type="qwen2"),
        Family("qwen3", "qwen3", "qwen3", "<think> block, then Hermes <tool_call> JSON", "<|im_end|>",
               ("<|im_end|>", "<|endoftext|>"), "hermes", "qwen",
               added_tokens=("<think>", "</think>", "<tool_response>", "</tool_response>"), model_type="qwen3"),
        Family("llama3", "llama3_1", "llama3_json", 'JSON {"name", "parameters"}; <|python_tag|> built-ins',
               "<|eot_id|>", ("<|eot_id|>", "<|eom_id|>"), "llama3_json", "smollm2",
               added_tokens=("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                             "<|eom_id|>", "<|python_tag|>"), bos="<|begin_of_text|>"),
        Family("gptoss", "gptoss", "harmony", "harmony: analysis/final channels, calls to=functions.NAME",
               "<|return|>", ("<|return|>", "<|call|>"), "openai", "smollm2",
               added_tokens=("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                             "<|return|>", "<|call|>"), model_type="gpt_oss"),
        Family("gemma3", "gemma3", "gemma3", "by prompt: JSON in a ```tool_code``` fence", "<end_of_turn>",
               ("<end_of_turn>", "<eos>"), None, "gemma3", model_type="gemma3_text"),
    ]
}

# Markers that identify a template's family when a folder does not say (checked in this order).
_MARKERS = [("<|channel|>", "gptoss"), ("<start_of_turn>", "gemma3"), ("<|start_header_id|>", "llama3"),
            ("</think>", "qwen3"), ("<tool_call>", "qwen2.5")]


def family_for_template(template: str) -> str:
    """The family whose format `template` renders ("chatml" when nothing more specific shows)."""
    for marker, family in _MARKERS:
        if marker in template:
            return family
    return "chatml"


def _token_id(tokenizer: Any, token: str) -> int | None:
    tid = tokenizer.convert_tokens_to_ids(token)
    return tid if isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id else None


def apply_family(name: str, tokenizer: Any, model: Any) -> None:
    """Set the family's chat template, turn-end eos and stop tokens on a tokenizer and model (in place)."""
    from .sources import template_by_name

    family = FAMILIES[name]
    if family.template is not None:
        text = template_by_name(family.template)
        if text is None:
            raise ValueError(f"family {name!r} needs template {family.template!r}, which is not installed (TRL?)")
        tokenizer.chat_template = text
    if _token_id(tokenizer, family.turn_end) is not None:
        tokenizer.eos_token = family.turn_end
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    stops = [i for t in family.stop_tokens if (i := _token_id(tokenizer, t)) is not None]
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    if tokenizer.bos_token_id is not None:
        model.config.bos_token_id = tokenizer.bos_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = stops or tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.bos_token_id = model.config.bos_token_id


def _gguf_tokenizer(source: str) -> Any:
    """The tokenizer of a bundled model, cached as a folder: from the alias's converted folder when
    there is one, else read from its GGUF (15-25 s). `family_tokenizer` sets the family's template,
    eos and tokens on top, so either source gives the same result."""
    from transformers import AutoTokenizer

    from . import sources

    folder = sources.cache_dir() / "tokenizers" / source
    if not (folder / "tokenizer_config.json").exists():
        with sources._file_lock(folder.parent / f".{source}.lock"):
            if not (folder / "tokenizer_config.json").exists():
                converted = sources.cache_dir() / "models" / {"smollm2": "smollm2-135m", "qwen": "qwen2.5-0.5b",
                                                               "gemma3": "gemma3-270m"}[source]
                if (converted / "tokenizer_config.json").exists():  # same vocabulary, read in a second
                    tokenizer = AutoTokenizer.from_pretrained(str(converted))
                else:
                    gguf = {"smollm2": sources.smollm2_gguf, "qwen": sources.qwen25_gguf,
                            "gemma3": sources.gemma3_gguf}[source]()
                    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
                with sources._atomic_dir(folder) as tmp:
                    tokenizer.save_pretrained(tmp)
    return AutoTokenizer.from_pretrained(str(folder))


def family_tokenizer(name: str) -> Any:
    """The tokenizer a tiny model of family `name` gets (see the table above)."""
    family = FAMILIES[name]
    tokenizer = _gguf_tokenizer(family.tokenizer)
    missing = [t for t in family.added_tokens if _token_id(tokenizer, t) is None]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    if family.bos is not None:
        tokenizer.bos_token = family.bos
    return tokenizer


def _tiny_config(family: Family, vocab: int, hidden: int, layers: int) -> Any:
    """A tiny config of the family's architecture. Sliding windows are 32 tokens, so test prompts
    run past them and serving is checked against training where windows matter."""
    from transformers import AutoConfig

    common: dict[str, Any] = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192)
    extra: dict[str, dict[str, Any]] = {
        "llama": dict(intermediate_size=hidden * 2, tie_word_embeddings=True),
        "qwen2": dict(intermediate_size=hidden * 2, tie_word_embeddings=True),
        "qwen3": dict(intermediate_size=hidden * 2, head_dim=hidden // 4, tie_word_embeddings=True),
        "gpt_oss": dict(intermediate_size=hidden, head_dim=hidden // 4, num_local_experts=4, num_experts_per_tok=2,
                        sliding_window=32, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 150000.0}),
        "gemma3_text": dict(intermediate_size=hidden * 2, head_dim=hidden // 4, num_key_value_heads=1,
                            sliding_window=32, tie_word_embeddings=True),
    }
    return AutoConfig.for_model(family.model_type, **{**common, **extra[family.model_type]})


def build_family_model(name: str, folder: Path, *, hidden_size: int = 64, num_layers: int = 2, seed: int = 0) -> Path:
    """Write a random-init tiny model of family `name` to `folder` (used by `models.build_tiny_model`)."""
    import torch
    from transformers import AutoModelForCausalLM

    family = FAMILIES[name]
    tokenizer = family_tokenizer(name)
    config = _tiny_config(family, len(tokenizer), hidden_size, num_layers)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    apply_family(name, tokenizer, model)
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "art_model.json").write_text(json.dumps({"family": name, "tiny": True}))
    return folder

