"""Random-initialised models of real shapes, with no weights on disk.

A shape's folder holds a config.json, the Qwen2.5 tokenizer and a ``RANDOM_INIT`` marker, and no
weights. Inside `random_weights(device)`, `AutoModelForCausalLM.from_pretrained` on such a folder
builds the model from its config straight on `device` (seed 0, so the trainer and the engine get
the same weights), so ART's own loading code (`art_train.models.load_causal_lm`) runs unchanged.
Throughput and memory do not depend on the weights' values.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOKENIZER_DIR = HERE / "wheels" / "tokenizer"  # prepared by prepare.sh, carried with the wheels
MARKER = "RANDOM_INIT"

_QWEN25 = dict(model_type="qwen2", hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6,
               rope_theta=1000000.0, use_sliding_window=False, bos_token_id=151643, eos_token_id=151645)
# the published configs' shapes (Qwen/Qwen2.5-0.5B-Instruct, Qwen/Qwen2.5-7B-Instruct)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {**_QWEN25, "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                     "tie_word_embeddings": True},
    "qwen2.5-7b": {**_QWEN25, "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
                   "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "tie_word_embeddings": False},
    # the CPU twin's stand-in for both (same family and tokenizer, a few million parameters)
    "tiny": {**_QWEN25, "vocab_size": 151936, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "tie_word_embeddings": True},
}


def tokenizer_dir(scratch: Path) -> Path:
    """The carried Qwen2.5 tokenizer, else one written to `scratch` from the [models] extra (CPU twin)."""
    if (TOKENIZER_DIR / "tokenizer.json").exists():
        return TOKENIZER_DIR
    out = scratch / "tokenizer"
    if not (out / "tokenizer.json").exists():
        save_tokenizer(out)
    return out


def save_tokenizer(out: Path) -> Path:
    """Writes the Qwen2.5 tokenizer and ART's qwen2.5 chat template to `out` (needs the [models] extra)."""
    from art_train.models import build_tiny_model

    tiny = build_tiny_model(out.parent / "tiny-qwen2.5", family="qwen2.5")
    out.mkdir(parents=True, exist_ok=True)
    for f in tiny.iterdir():
        if f.is_file() and f.name not in _NOT_TOKENIZER:
            shutil.copy(f, out / f.name)
    return out


_NOT_TOKENIZER = {"model.safetensors", "config.json", "generation_config.json", "art_model.json"}


def model_folder(shape: str, scratch: Path) -> Path:
    """A folder for `shape`: config.json, tokenizer files, art_model.json and the RANDOM_INIT marker."""
    from transformers import AutoConfig

    folder = scratch / f"model-{shape}"
    if (folder / MARKER).exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for f in tokenizer_dir(scratch).iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    params = dict(SHAPES[shape])
    config = AutoConfig.for_model(params.pop("model_type"), **params)
    config.save_pretrained(folder)
    (folder / "art_model.json").write_text(json.dumps({"family": "qwen2.5", "random_init": shape}))
    (folder / MARKER).write_text(shape)
    return folder


def parameter_count(shape: str) -> int:
    c = SHAPES[shape]
    h, i, layers, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    per_layer = h * h * 2 + 2 * h * kv + 3 * h * i + h + 2 * kv + 2 * h  # q,o + k,v + mlp + biases + norms
    return layers * per_layer + v * h * (1 if c["tie_word_embeddings"] else 2) + h


@contextlib.contextmanager
def random_weights(device: str) -> Iterator[None]:
    """While inside, loading a RANDOM_INIT folder builds its model from config on `device` (seed 0)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    original = AutoModelForCausalLM.from_pretrained

    def from_pretrained(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not (Path(str(path)) / MARKER).exists():
            return original(path, *args, **kwargs)
        config = AutoConfig.from_pretrained(str(path))
        dtype = kwargs.get("dtype") or torch.float32
        cuda = [torch.device(device).index or 0] if device.startswith("cuda") else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(0)
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(
                    config, dtype=dtype, attn_implementation=kwargs.get("attn_implementation", "sdpa"))
        return model

    AutoModelForCausalLM.from_pretrained = from_pretrained  # type: ignore[method-assign]
    try:
        yield
    finally:
        AutoModelForCausalLM.from_pretrained = original  # type: ignore[method-assign]
