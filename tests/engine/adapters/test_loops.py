"""The README's chat loops (examples/loops/), one per model API, through a pause: the model
calls run_code, the script waits for approval, the host keeps only the conversation, a person
approves in another process (`codemode approve`), a new engine on the same log advances the
conversation, and the tool result goes back under the model's own call id. Then the turns a
model gets wrong or cuts short: each is answered, or ends the turn, and the loop goes on.

The SDK clients are the real ones; only the network is replaced (httpx.MockTransport serves
fixed model turns), and every request they send is checked against the SDK's own types.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import pytest
from anthropic.types import MessageParam, ToolParam
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import FunctionToolParam, ResponseInputItemParam

from engine import CodeMode
from engine._loading import load_tools
from tests.engine.adapters.sdk_types import conforms
from tests.engine.conftest import InProcessRunner
from tests.engine.test_cli import ROOT, codemode

CODE = (
    'const prs = await tools.github__list_prs({ repo: "acme/api" });\n'
    "const pr = prs[prs.length - 1];\n"
    'return await tools.github__comment({ number: pr.number, body: "Still needed?" });'
)
ARGS = json.dumps({"code": CODE})


def _example(name: str) -> Any:
    path = ROOT / "examples" / "loops" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"loop_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A model call: its id, the tool it names and its arguments (data, or JSON text).
Call = tuple[str, str, Any]


def _anthropic_turns(calls: list[Call] | None = None) -> list[dict[str, Any]]:
    usage = {"input_tokens": 10, "output_tokens": 20}
    head = {
        "type": "message",
        "role": "assistant",
        "model": "m",
        "stop_sequence": None,
        "usage": usage,
    }
    return [
        {
            **head,
            "id": "msg_1",
            "stop_reason": "tool_use",
            "content": [
                {"type": "text", "text": "I'll ping the oldest PR."},
                *(
                    {"type": "tool_use", "id": i, "name": name, "input": arguments}
                    for i, name, arguments in calls or [("toolu_01", "run_code", {"code": CODE})]
                ),
            ],
        },
        {
            **head,
            "id": "msg_2",
            "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "Done."}],
        },
    ]


def _chat_turns(calls: list[Call] | None = None) -> list[dict[str, Any]]:
    def turn(message: dict[str, Any], reason: str) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "finish_reason": reason, "logprobs": None, "message": message}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    first: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": _text(arguments)}}
            for i, name, arguments in calls or [("call_01", "run_code", ARGS)]
        ],
    }
    last = {"role": "assistant", "content": "Done.", "refusal": None, "annotations": []}
    return [turn(first, "tool_calls"), turn(last, "stop")]


def _responses_turns(calls: list[Call] | None = None) -> list[dict[str, Any]]:
    def turn(output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "m",
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }

    made = [
        {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": i,
            "name": name,
            "arguments": _text(arguments),
            "status": "completed",
        }
        for n, (i, name, arguments) in enumerate(calls or [("call_01", "run_code", ARGS)])
    ]
    text = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
    }
    return [turn(made), turn([text])]


def _text(arguments: Any) -> str:
    """A call's arguments as the OpenAI APIs give them: JSON text (or text that is none)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _client(api: str, turns: list[dict[str, Any]], sent: list[dict[str, Any]]) -> Any:
    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=turns[len(sent) - 1])

    http = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    if api == "anthropic":
        return anthropic.AsyncAnthropic(api_key="test", http_client=http, max_retries=0)
    return openai.AsyncOpenAI(api_key="test", http_client=http, max_retries=0)


APIS = {
    "anthropic": ("anthropic_loop", _anthropic_turns, "messages", MessageParam, ToolParam),
    "openai_chat": (
        "openai_chat_loop",
        _chat_turns,
        "messages",
        ChatCompletionMessageParam,
        ChatCompletionToolParam,
    ),
    "openai_responses": (
        "openai_responses_loop",
        _responses_turns,
        "input",
        ResponseInputItemParam,
        FunctionToolParam,
    ),
}


def _engine(data: Path) -> CodeMode:
    tools, _ = load_tools(str(ROOT / "examples" / "tracker_tools.py"))
    return CodeMode(tools, runner=InProcessRunner(), data_dir=data, type_check="off")


@pytest.mark.parametrize("api", list(APIS))
async def test_a_paused_script_in_the_chat_loop(api: str, tmp_path: Path) -> None:
    module_name, turns, field, message_type, tool_type = APIS[api]
    advance = _example(module_name).advance
    sent: list[dict[str, Any]] = []
    client = _client(api, turns(), sent)
    data = tmp_path / "data"
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "Ping the oldest open PR."}]

    engine = _engine(data)
    try:
        assert await advance(client, engine, conversation) is False  # paused for approval
    finally:
        await engine.aclose()
    assert len(sent) == 1
    # The host keeps the conversation (the call id is in it), here as a file.
    saved = tmp_path / "conversation.json"
    saved.write_text(json.dumps(conversation))

    # A person approves later, in another process, on the same log.
    listed = codemode("scripts", "--status", "paused", "--json", "--data-dir", str(data))
    (script,) = [json.loads(line) for line in listed.stdout.splitlines()]
    shown = json.loads(codemode("show", script["id"], "--json", "--data-dir", str(data)).stdout)
    (waiting,) = [c for c in shown["calls"] if c["state"] == "awaiting_approval"]
    assert waiting["name"] == "github__comment"
    approved = codemode("approve", script["id"], waiting["call_id"], "--data-dir", str(data))
    assert approved.returncode == 0, approved.stderr

    # The host, restarted: a new engine on the same log, the conversation as it kept it.
    conversation = json.loads(saved.read_text())
    engine = _engine(data)
    try:
        assert await advance(client, engine, conversation) is True
    finally:
        await engine.aclose()
    assert len(sent) == 2
    for message in conversation:  # what the host keeps is what it would send next
        conforms(message_type, message)
    for request in sent:
        for tool in request["tools"]:
            conforms(tool_type, tool)
        for message in request[field]:
            conforms(message_type, message)
    # The result went back under the model's own id, and the script ran once.
    answer = json.dumps(sent[1][field])
    assert "posted" in answer, answer  # the comment tool's result
    ids = {"anthropic": "toolu_01", "openai_chat": "call_01", "openai_responses": "call_01"}
    assert answer.count(ids[api]) == 2  # the model's call and the result for it
    shown = json.loads(codemode("show", script["id"], "--json", "--data-dir", str(data)).stdout)
    assert [c["state"] for c in shown["calls"]] == ["done", "done"]
    assert shown["script"]["status"] == "finished"


@pytest.mark.parametrize("api", list(APIS))
async def test_a_call_run_code_cannot_take_is_answered_for_the_model(
    api: str, tmp_path: Path
) -> None:
    """A turn's calls without code, of another tool, with an argument too many or (in
    OpenAI's text) no JSON: each is answered under its id, saying what to send, and the
    loop goes on with the model; the call beside them runs."""
    _, turns, field, message_type, _ = APIS[api]
    calls: list[Call] = [
        ("c_none", "run_code", {}),
        ("c_direct", "github__list_prs", {"repo": "acme/api"}),
        ("c_extra", "run_code", {"code": "return 1", "timeout": 5}),
        ("c_good", "run_code", {"code": "return 6 * 7"}),
    ]
    if api != "anthropic":  # Anthropic's input is an object; OpenAI's arguments are text
        calls.append(("c_cut", "run_code", '{"code": "return'))
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    sent = await _advanced(api, turns(calls), conversation, tmp_path)
    assert len(sent) == 2
    for message in sent[1][field]:
        conforms(message_type, message)
    answers = _answers(api, sent[1][field])
    assert answers == {
        "c_none": 'run_code takes only {"code": "<the script>"}',
        "c_direct": "github__list_prs is not called directly: call it from run_code, in a "
        "script such as `return await tools.github__list_prs({ ... })`",
        "c_extra": 'run_code takes only {"code": "<the script>"}; leave out \'timeout\'',
        "c_good": "Script finished.\nReturned:\n42",
        **(
            {}
            if api == "anthropic"
            else {
                "c_cut": 'run_code takes only {"code": "<the script>"}; its arguments were '
                "no JSON (unexpected end of data: line 1 column 17 (char 16))"
            }
        ),
    }


async def _advanced(
    api: str, turns: list[dict[str, Any]], conversation: list[dict[str, Any]], data: Path
) -> list[dict[str, Any]]:
    """Advance ``conversation`` with ``api``'s loop, the model's turns ``turns``, to the
    model's answer (a new engine on the log in ``data``); the requests the loop sent."""
    sent: list[dict[str, Any]] = []
    engine = _engine(data / "data")
    try:
        advance = _example(APIS[api][0]).advance
        assert await advance(_client(api, turns, sent), engine, conversation) is True
    finally:
        await engine.aclose()
    return sent


def _answers(api: str, items: list[dict[str, Any]]) -> dict[str, str]:
    """The text of each tool result among the items of a request, by the call's id."""
    if api == "anthropic":
        return {
            b["tool_use_id"]: b["content"][0]["text"]
            for m in items
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_result"
        }
    if api == "openai_chat":
        return {m["tool_call_id"]: m["content"] for m in items if m["role"] == "tool"}
    return {
        i["call_id"]: i["output"][0]["text"]
        for i in items
        if i.get("type") == "function_call_output"
    }


async def test_a_responses_reply_cut_short_ends_the_loop(tmp_path: Path) -> None:
    """A reply that holds the model's reasoning alone (cut short at max_output_tokens) ends
    the turn, as one that calls no tool does: the loop asked the model again, without end."""
    (text_turn,) = _responses_turns()[1:]
    cut = {
        **text_turn,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "reasoning", "id": "rs_1", "summary": []}],
    }
    items: list[dict[str, Any]] = [{"role": "user", "content": "Think hard."}]
    sent = await _advanced("openai_responses", [cut, text_turn], items, tmp_path)
    assert len(sent) == 1
    assert items[-1] == {"type": "reasoning", "id": "rs_1", "summary": []}
    for item in items:
        conforms(ResponseInputItemParam, item)


async def test_an_anthropic_reply_of_no_content_is_not_kept(tmp_path: Path) -> None:
    """A reply with no content (end_turn, the model had nothing to add after its results)
    ends the turn and stays out of the conversation: the API refuses an empty message
    anywhere but last, so kept, it failed every request of the conversation after it."""
    first, done = _anthropic_turns([("toolu_01", "run_code", {"code": "return 6 * 7"})])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    await _advanced("anthropic", [first, {**done, "content": []}], messages, tmp_path)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    messages.append({"role": "user", "content": "And?"})
    (sent,) = await _advanced("anthropic", [done], messages, tmp_path)
    assert all(m["content"] for m in sent["messages"]), sent["messages"]


async def test_a_chat_refusal_is_kept_as_the_models_answer(tmp_path: Path) -> None:
    """A refusal (its content null, its text in `refusal`) is the turn's answer, kept in the
    conversation as the API's own message type takes it (the loop kept the message's role
    alone: the model's answer was lost)."""
    (done,) = _chat_turns()[1:]
    said = "I can't help with that."
    message = {**done["choices"][0]["message"], "content": None, "refusal": said}
    refused = {**done, "choices": [{**done["choices"][0], "message": message}]}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Do the bad thing."}]
    await _advanced("openai_chat", [refused], messages, tmp_path)
    assert messages[-1] == {"role": "assistant", "refusal": said}
    conforms(ChatCompletionMessageParam, messages[-1])
