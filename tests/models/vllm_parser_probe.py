"""Run by vLLM's interpreter (not ART's): vLLM's own tool-call parsers on texts given as JSON on stdin.

Input: {"cases": [{"id", "parser", "tokenizer", "text", "harmony", "tools"}]}. Output on stdout, one
JSON object: {"registered": [names], "results": {id: {"class", "calls": [[name, args]], "content", "error"}}}.
Only vLLM's parser modules are imported: no engine, no server. Exit status 3: vLLM is not importable.
"""

from __future__ import annotations

import json
import sys


def _parse(case: dict, tokenizers: dict) -> dict:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    tokenizer = tokenizers[case["tokenizer"]]
    # what `--enable-auto-tool-choice --tool-call-parser NAME` composes at startup, checked against the tokenizer
    parser_cls = ParserManager.get_parser(tool_parser_name=case["parser"], enable_auto_tools=True,
                                          is_harmony=case["harmony"], tokenizer=tokenizer)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], tools=case["tools"])
    parser = parser_cls(tokenizer, request.tools)
    if case["harmony"]:  # harmony is parsed from token ids of its own encoding (o200k_harmony)
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding

        encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        ids = encoding.encode(case["text"], allowed_special="all")
    else:
        ids = tokenizer.encode(case["text"], add_special_tokens=False)
    _, content, calls = parser.parse(case["text"], request, enable_auto_tools=True, model_output_token_ids=ids)
    return {"class": type(parser.tool_parser).__name__,
            "calls": [[c.name, json.loads(c.arguments)] for c in calls or []], "content": content}


def main() -> None:
    try:  # imported before the cases arrive, so the caller can prepare them meanwhile
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: F401
        from vllm.parser.parser_manager import ParserManager  # noqa: F401
        from vllm.tool_parsers import ToolParserManager
    except ImportError as exc:
        print(f"vLLM is not importable here ({sys.executable}): {exc}", file=sys.stderr)
        sys.exit(3)
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoTokenizer

    cases = json.load(sys.stdin)["cases"]
    folders = sorted({c["tokenizer"] for c in cases})
    with ThreadPoolExecutor(4) as pool:  # loading Gemma 3's 262k vocabulary dominates: overlap it with the rest
        tokenizers = dict(zip(folders, pool.map(AutoTokenizer.from_pretrained, folders), strict=True))
    results = {}
    for case in cases:
        try:
            results[case["id"]] = _parse(case, tokenizers)
        except Exception as exc:  # noqa: BLE001 - reported to the test, which names the case
            results[case["id"]] = {"error": f"{type(exc).__name__}: {exc}"}
    json.dump({"registered": ToolParserManager.list_registered(), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
