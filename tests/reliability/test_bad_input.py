"""Bad input against a real `art serve`: every case gets an error that names the problem and the fix,
and the process keeps serving afterwards.

Each case is a row: what is sent, the status expected, and substrings that must be in the error
message: the first names the problem, the rest the fix. docs/reliability.md lists the same rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.reliability.conftest import MAX_SEQ_LEN, Served, assert_still_serving

HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


@dataclass
class Case:
    id: str
    path: str
    body: Any = None  # JSON-encoded (json.dumps, so NaN passes through as the literal NaN)
    raw: bytes | None = None  # sent as is instead of `body`
    status: int = 400
    expect: list[str] = field(default_factory=list)  # problem first, then the fix
    method: str = "POST"


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "rel", "messages": HI, "max_tokens": 1, **fields}


def sampled(text: str, ids: list[int], logprobs: list[float] | None = None) -> dict[str, Any]:
    sample: dict[str, Any] = {"token_ids": ids}
    if logprobs is not None:
        sample["logprobs"] = logprobs
    return {"role": "assistant", "content": text, "sample": sample}


def trajectory(reward: Any = 1.0, turns: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"messages": [*HI, *(turns if turns is not None else [sampled("hello", [28120, 2])])], "reward": reward}


def train(*groups: list[dict[str, Any]], **config: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"groups": [{"trajectories": g} for g in groups]}
    if config:
        body["config"] = config
    return body


GOOD_GROUP = [trajectory(1.0), trajectory(0.0)]
REGISTER = "/art/v1/models/register"
TRAIN = "/art/v1/models/rel/train"
CHAT = "/v1/chat/completions"

HTTP_CASES = [
    Case("invalid JSON", CHAT, raw=b'{"model": "rel", "messages": [', expect=["not valid JSON", "send one UTF-8 JSON object"]),
    Case("invalid UTF-8", CHAT, raw=b'{"model": "rel\xff\xfe", "messages": []}', expect=["not valid JSON", "UTF-8"]),
    Case("empty body", CHAT, raw=b"", expect=["not valid JSON", "send one UTF-8 JSON object"]),
    Case("body is a list", CHAT, body=[chat()], expect=["invalid request body", "valid dictionary"]),
    Case("messages is a string", CHAT, body=chat(messages="hi"), expect=["messages", "valid list"]),
    Case("no messages", CHAT, body=chat(messages=[]), expect=["messages", "at least 1 item"]),
    Case("message is a string", CHAT, body=chat(messages=["hi"]), expect=["messages.0", "valid dictionary"]),
    Case("unknown role", CHAT, body=chat(messages=[{"role": "robot", "content": "x"}]),
         expect=["role 'robot'", "use system, user, assistant or tool"]),
    Case("temperature is a string", CHAT, body=chat(temperature="hot"),
         expect=["temperature", "valid number"]),
    Case("temperature out of range", CHAT, body=chat(temperature=-1),
         expect=["temperature", "greater than or equal to 0"]),
    Case("huge body", CHAT, raw=json.dumps(chat(messages=[{"role": "user", "content": "x" * (2 * 2**20)}])).encode(),
         status=413, expect=["request body is", "limit of 1048576", "--max-request-mb"]),
    Case("unknown model", CHAT, body=chat(model="nope"), status=404, expect=["'nope' is not registered", "Register it first"]),
    Case("@step not a number", CHAT, body=chat(model="rel@latest"), status=404,
         expect=["must be a step number", "rel@3"]),
    Case("@step never trained", CHAT, body=chat(model="rel@99"), status=404, expect=["no checkpoint 99", "steps: [0"]),
    Case("negative @step", CHAT, body=chat(model="rel@-1"), status=404, expect=["must be a step number", "rel@3"]),
    Case("max_tokens negative", CHAT, body=chat(max_tokens=-5), expect=["max_tokens", "greater than or equal to 1"]),
    Case("max_tokens zero", CHAT, body=chat(max_tokens=0), expect=["max_tokens", "greater than or equal to 1"]),
    Case("max_tokens huge", CHAT, body=chat(max_tokens=10**12),
         expect=["max_tokens=1000000000000", f"limit of {MAX_SEQ_LEN}", "ask for at most"]),
    Case("n in the thousands", CHAT, body=chat(n=5000), expect=["n", "less than or equal to 64"]),
    Case("tool without a function", CHAT, body=chat(tools=[{"type": "function"}]),
         expect=["tools[0]", "function", '{"type": "function", "function": {"name"']),
    Case("tool without a name", CHAT, body=chat(tools=[{"type": "function", "function": {"parameters": {}}}]),
         expect=["tools[0].function has no 'name'", '{"type": "function", "function": {"name"']),
    Case("tool parameters not an object", CHAT,
         body=chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
         expect=["tools[0].function.parameters", "JSON Schema object"]),
    Case("tools not a list", CHAT, body=chat(tools=TOOL), expect=["tools", "valid list"]),
    Case("prompt longer than the context", CHAT, body=chat(messages=[{"role": "user", "content": "hello " * 400}]),
         expect=["tokens, at or over the model's limit", "shorten the conversation or raise ModelConfig.max_seq_len"]),
    Case("unknown model, streaming", CHAT, body=chat(model="nope", stream=True), status=404,
         expect=["'nope' is not registered", "Register it first"]),
    # as strict as OpenAI: no type coercion, required message fields required (each a 400 naming the field)
    Case("boolean as a string", CHAT, body=chat(logprobs="true"), expect=["logprobs", "valid boolean"]),
    Case("integer as a string", CHAT, body=chat(max_tokens="5"), expect=["max_tokens", "valid integer"]),
    Case("tool message without tool_call_id", CHAT,
         body=chat(messages=[*HI, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                             {"role": "tool", "content": "sunny"}]),
         expect=["messages[2].tool_call_id", "is required"]),
    Case("user message without content", CHAT, body=chat(messages=[{"role": "user"}]),
         expect=["messages[0].content", "is required"]),
    Case("assistant message with neither content nor tool_calls", CHAT,
         body=chat(messages=[*HI, {"role": "assistant"}, *HI]), expect=["messages[1]", "content or tool_calls"]),
    Case("tool call arguments not a string", CHAT,
         body=chat(messages=[*HI, {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f",
                                                                                            "arguments": {}}}]},
                             {"role": "tool", "tool_call_id": "c1", "content": "x"}]),
         expect=["messages[1].tool_calls[0].function.arguments", "JSON string"]),
    Case("top_logprobs too many", CHAT, body=chat(logprobs=True, top_logprobs=50),
         expect=["top_logprobs", "less than or equal to 20"]),
]

TRAJECTORY_CASES = [
    Case("NaN reward", TRAIN, body=train([trajectory(float("nan")), trajectory(0.0)]), status=422,
         expect=["reward nan", "must be finite numbers"]),
    Case("infinite reward", TRAIN, body=train([trajectory(float("inf")), trajectory(0.0)]), status=422,
         expect=["reward inf", "must be finite numbers"]),
    Case("reward is a string", TRAIN, body=train([trajectory("high"), trajectory(0.0)]), status=422,
         expect=["reward", "valid number"]),
    Case("no groups", TRAIN, body=train(), expect=["no trajectory groups", "pass at least one"]),
    Case("no assistant turn", TRAIN, body=train([trajectory(1.0, turns=[]), trajectory(0.0)]),
         expect=["has no assistant turn", "art.capture()"]),
    Case("token ids outside the vocabulary", TRAIN,
         body=train([trajectory(1.0, [sampled("x", [5, 10**7])]), trajectory(0.0)]),
         expect=["token id 10000000", "vocabulary", "drop the turn's 'sample'"]),
    Case("negative token id", TRAIN, body=train([trajectory(1.0, [sampled("x", [-3])]), trajectory(0.0)]),
         expect=["token id -3", "vocabulary"]),
    Case("logprobs of the wrong length", TRAIN, body=train([trajectory(1.0, [sampled("x", [5, 6], [-0.1])]), trajectory(0.0)]),
         status=422, expect=["2 token ids but 1 logprobs", "one logprob per sampled token"]),
    Case("positive logprob", TRAIN, body=train([trajectory(1.0, [sampled("x", [5, 6], [-0.1, 2.0])]), trajectory(0.0)]),
         expect=["logprob 2", "log-probabilities are <= 0"]),
    Case("sample on a user turn", TRAIN,
         body=train([trajectory(1.0, [{"role": "user", "content": "x", "sample": {"token_ids": [1]}}]), trajectory(0.0)]),
         status=422, expect=["only assistant turns can carry a sample"]),
    Case("train an unknown model", "/art/v1/models/nope/train", body=train(GOOD_GROUP), status=404,
         expect=["'nope' is not registered", "Register it first"]),
]

CONFIG_CASES = [
    Case("negative learning rate", TRAIN, body=train(GOOD_GROUP, learning_rate=-1), status=422,
         expect=["learning_rate", "greater than 0"]),
    Case("misspelt config field", TRAIN, body=train(GOOD_GROUP, learning_rat=1e-5), status=422,
         expect=["learning_rat", "Extra inputs are not permitted"]),
    Case("unknown loss", TRAIN, body=train(GOOD_GROUP, loss="ppo"), status=422, expect=["loss", "'grpo'"]),
    Case("max_seq_len too small", TRAIN, body=train(GOOD_GROUP, max_seq_len=4), status=422,
         expect=["max_seq_len", "greater than or equal to 16"]),
    Case("lora_rank zero", REGISTER, status=422, expect=["lora_rank", "greater than or equal to 1"],
         body={"name": "cfg", "base_model": "smollm2-135m", "trainable": True, "config": {"lora_rank": 0}}),
    Case("unknown engine", REGISTER, status=422, expect=["engine", "'transformers' or 'vllm'"],
         body={"name": "cfg", "base_model": "smollm2-135m", "trainable": True, "config": {"engine": "tgi"}}),
    Case("base model folder missing", REGISTER, status=404, expect=["/no/such/model", "pass a local folder or"],
         body={"name": "cfg", "base_model": "/no/such/model", "trainable": True}),
    Case("no base model", REGISTER, status=422, expect=["base_model", "Field required"],
         body={"name": "cfg", "trainable": True}),
    Case("register body not JSON", REGISTER, raw=b"name=cfg", expect=["not valid JSON", "send one UTF-8 JSON object"]),
]


def _send(served: Served, case: Case) -> httpx.Response:
    content = case.raw if case.raw is not None else json.dumps(case.body).encode()
    return httpx.request(case.method, served.url + case.path, content=content, timeout=120,
                         headers={"content-type": "application/json"})


def _message(response: httpx.Response) -> str:
    """The error message: an HTTP error body, or the error event of a training stream."""
    if response.headers.get("content-type", "").startswith("application/x-ndjson"):
        last = json.loads(response.text.strip().splitlines()[-1])
        assert last["type"] == "error", f"the step ran: {last}"
        return last["error"]["message"]
    return response.json()["error"]["message"]


@pytest.mark.parametrize("case", HTTP_CASES + TRAJECTORY_CASES + CONFIG_CASES, ids=lambda c: c.id)
def test_bad_input_is_named_and_the_server_stays_up(served: Served, case: Case) -> None:
    response = _send(served, case)
    message = _message(response)
    assert response.status_code == case.status, message
    for part in case.expect:
        assert part in message, f"{part!r} not in {message!r}"
    assert served.alive()
    assert_still_serving(served.url)


def test_every_kind_of_bad_input_is_covered() -> None:
    assert len(HTTP_CASES) + len(TRAJECTORY_CASES) + len(CONFIG_CASES) >= 30


def test_an_empty_group_trains_nothing_and_says_why(served: Served) -> None:
    """A group whose rollouts all failed is legitimate: the step goes on and names the group it skipped."""
    response = _send(served, Case("empty group", TRAIN, body=train([], GOOD_GROUP)))
    last = json.loads(response.text.strip().splitlines()[-1])
    assert last["type"] == "result", last
    assert last["metrics"]["skipped_groups"] == ["group 0: has 0 trajectory, needs 2 or more"]
    assert last["metrics"]["groups_trainable"] == 1
    assert_still_serving(served.url)


def test_a_rejected_step_leaves_nothing_to_replay(served: Served) -> None:
    """A step refused as bad input must not be journalled as pending, or every later call would retry it."""
    before = httpx.get(f"{served.url}/art/v1/models/rel/step").json()["step"]
    bad = _send(served, Case("bad", TRAIN, body=train([trajectory(1.0, [sampled("x", [10**7])]), trajectory(0.0)])))
    assert bad.status_code == 400
    rundir = served.home / "reliability" / "models" / "rel"
    assert not (rundir / "train_pending.json").exists()
    good = _send(served, Case("good", TRAIN, body=train(GOOD_GROUP)))
    assert json.loads(good.text.strip().splitlines()[-1])["step"] == before + 1
