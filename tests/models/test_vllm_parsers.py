"""Every family's vLLM `--tool-call-parser` (`vllm_tool_parser_for`) exists in vLLM's registry, starts
with the family's tokenizer, and reads the same tool call as ART's parser from the reply the family's
template expects (the assistant turn it renders for that call).

vLLM runs in its own interpreter (ART_VLLM_PYTHON, `bash scripts/setup_vllm.sh`): one subprocess
imports only vLLM's parser modules (no engine, no server) and parses every family's texts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import art_core as art
from art_train.engines.tool_parsers import get_tool_parser
from art_train.families import FAMILIES, family_tokenizer
from art_train.models import chat_template_for, template_messages

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("vllm_parser_probe.py")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
USER = {"role": "user", "content": "What is the weather in Paris?"}
EXPECTED = [("get_weather", {"city": "Paris"})]
PLAIN = "It is sunny in Paris."
HARMONY_PLAIN = f"<|channel|>final<|message|>{PLAIN}"  # a harmony reply is always in a channel


def _no_vllm(message: str) -> None:
    if os.environ.get("ART_REQUIRE_VLLM") == "1":  # CI: a missing vLLM is a failure, not a skip
        pytest.fail(message + " (ART_REQUIRE_VLLM=1)")
    pytest.skip(message)


def _vllm_python() -> str:
    python = os.environ.get("ART_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists():
        _no_vllm(f"no vLLM at {python}: run `bash scripts/setup_vllm.sh` or set ART_VLLM_PYTHON")
    return python


def _vllm_name(family: str) -> str:
    """The parser name ART's vLLM engine passes for a model of `family` (via its tool parser)."""
    from art_train.models import vllm_tool_parser_for

    return vllm_tool_parser_for("not-a-model", art.ModelConfig(tool_parser=FAMILIES[family].tool_parser))


def _emitted_call(family: str, tokenizer: Any) -> str:
    """The assistant text the family's template renders for a call of get_weather, cut at its stop tokens:
    what a model trained on that template emits, as the engine hands it to a parser."""
    name = FAMILIES[family].template
    template = chat_template_for(tokenizer, art.ModelConfig(chat_template=name) if name else None)
    def render(messages: list[dict[str, Any]], prompt: bool) -> str:
        return tokenizer.apply_chat_template(template_messages(messages), tools=TOOLS, chat_template=template,
                                             tokenize=False, add_generation_prompt=prompt)
    prefix = render([USER], True)
    full = render([USER, {"role": "assistant", "content": "", "tool_calls": [CALL]}], False)
    assert full.startswith(prefix), f"{family}: the rendered call does not extend the generation prompt"
    text = full[len(prefix):]
    cut = min([i for t in FAMILIES[family].stop_tokens if (i := text.find(t)) >= 0] or [len(text)])
    return text[:cut]


def _calls(tool_calls: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in tool_calls]


@pytest.fixture(scope="module")
def vllm_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """{"registered": vLLM's parser names, "texts": {family: emitted call}, "results": {case id: vLLM's parse},
    "missing": {family: why its tokenizer is not here}}."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    # started first: it imports vLLM while this process builds the cases
    probe = subprocess.Popen([_vllm_python(), str(PROBE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        root = tmp_path_factory.mktemp("vllm-parsers")
        cases, texts, missing = [], {}, {}
        for family in FAMILIES:
            try:
                tokenizer = family_tokenizer(family)
            except FileNotFoundError as exc:  # the Qwen and Gemma tokenizers come from the .[models] weights
                missing[family] = str(exc)
                continue
            texts[family] = _emitted_call(family, tokenizer)
            folder = root / family
            if FAMILIES[family].vllm_tool_parser is None and "chatml" in texts:
                # vLLM runs its fallback (hermes), which reads no vocabulary: spare loading Gemma 3's 262k
                # tokens there (test_bundled starts vLLM on the real gemma3-270m with it)
                folder = root / "chatml"
            else:
                tokenizer.save_pretrained(folder)
            plain = HARMONY_PLAIN if family == "gptoss" else PLAIN
            common = {"parser": _vllm_name(family), "tokenizer": str(folder), "harmony": family == "gptoss",
                      "tools": TOOLS}
            cases += [{"id": f"{family}/call", "text": texts[family], **common},
                      {"id": f"{family}/plain", "text": plain, **common}]
        # Qwen2.5-Coder's tagless call (docs/models.md): ART's hermes reads it, vLLM's does not
        if "qwen2.5" in texts:
            bare = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
            cases.append({**cases[[c["id"] for c in cases].index("qwen2.5/call")], "id": "qwen2.5/bare", "text": bare})
            texts["qwen2.5/bare"] = bare
        if "llama3" in texts:  # Llama 3.x may open a call with <|python_tag|>; both parsers skip it
            tagged = "<|python_tag|>" + texts["llama3"]
            cases.append({**cases[[c["id"] for c in cases].index("llama3/call")], "id": "llama3/tagged", "text": tagged})
            texts["llama3/tagged"] = tagged
        out, err = probe.communicate(json.dumps({"cases": cases}), timeout=120)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    if probe.returncode == 3:
        _no_vllm(err.strip().splitlines()[-1])
    assert probe.returncode == 0, err[-3000:]
    return {**json.loads(out), "texts": texts, "missing": missing}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_maps_to_a_registered_vllm_parser(family: str, vllm_results: dict[str, Any]) -> None:
    assert _vllm_name(family) in vllm_results["registered"], (
        f"{family}: vLLM 0.32 has no tool parser {_vllm_name(family)!r}; it has {vllm_results['registered']}")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_vllm_reads_the_call_the_family_template_renders_as_art_does(family: str, vllm_results: dict[str, Any]) -> None:
    if family in vllm_results["missing"]:
        if os.environ.get("ART_REQUIRE_BUNDLED") == "1":
            pytest.fail(vllm_results["missing"][family])
        pytest.skip(vllm_results["missing"][family])
    text = vllm_results["texts"][family]
    ours = get_tool_parser(FAMILIES[family].tool_parser)(text)
    assert _calls(ours.tool_calls) == EXPECTED and ours.error is None, (family, text)
    call, plain = vllm_results["results"][f"{family}/call"], vllm_results["results"][f"{family}/plain"]
    assert "error" not in call, f"{family}: vLLM failed on {text!r}: {call['error']}"
    assert [tuple(c) for c in call["calls"]] == (EXPECTED if FAMILIES[family].vllm_tool_parser else [])
    if FAMILIES[family].vllm_tool_parser is None:  # no vLLM parser for this format: the call comes back as text
        assert call["content"] == text
    assert plain.get("calls") == [] and plain.get("content") == PLAIN, plain  # a reply with no call is content


def test_vllm_hermes_keeps_qwen_coder_bare_json_calls_as_text(vllm_results: dict[str, Any]) -> None:
    if "qwen2.5/bare" not in vllm_results["results"]:
        pytest.skip(vllm_results["missing"].get("qwen2.5", "no qwen2.5 tokenizer"))
    bare = vllm_results["results"]["qwen2.5/bare"]
    assert _calls(get_tool_parser("hermes")(vllm_results["texts"]["qwen2.5/bare"]).tool_calls) == EXPECTED
    assert bare["calls"] == [] and bare["content"] == vllm_results["texts"]["qwen2.5/bare"]


def test_vllm_llama3_json_reads_a_python_tag_call_as_art_does(vllm_results: dict[str, Any]) -> None:
    tagged = vllm_results["results"]["llama3/tagged"]
    assert _calls(get_tool_parser("llama3_json")(vllm_results["texts"]["llama3/tagged"]).tool_calls) == EXPECTED
    assert [tuple(c) for c in tagged["calls"]] == EXPECTED, tagged
