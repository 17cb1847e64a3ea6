"""Every format of the run_code tool and of its results, checked against the official SDKs'
own types (anthropic, openai, mcp): a shape the SDK would not take fails here."""

from __future__ import annotations

import base64
from pathlib import Path

import mcp.types
import pytest
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import FunctionToolParam, ResponseInputItemParam
from pydantic import ValidationError

from engine import Attachment, CodeMode, CodeModeError, Limits, RunResult, SqliteStore, tool
from engine.adapters import FORMATS
from tests.engine.adapters.sdk_types import conforms
from tests.engine.conftest import InProcessRunner

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
FILES = [
    Attachment("chart.png", data=PNG, mime="image/png"),
    Attachment("report.pdf", data=b"%PDF-1.4\n%%EOF\n", mime="application/pdf"),
    Attachment("logo.svg", data=b"<svg/>", mime="image/svg+xml"),
    Attachment("beep.wav", data=b"RIFF....WAVE", mime="audio/wav"),
    Attachment("notes.md", data=b"# notes\n", mime="text/markdown"),
]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.fixture
async def engine():
    e = CodeMode([add], runner=InProcessRunner(), type_check="off")
    yield e
    await e.aclose()


async def _shown(engine: CodeMode) -> RunResult:
    code = """
    files.show("chart.png"); files.show("report.pdf"); files.show("logo.svg"); files.show("beep.wav");
    return await tools.add({ a: 1, b: 2 });
    """
    result = await engine.run_code(code, files=FILES)
    assert result.status == "finished", result.text
    assert [
        m["mimeType"] if "mimeType" in m else m["resource"]["mimeType"] for m in result.media
    ] == [
        "image/png",
        "application/pdf",
        "image/svg+xml",
        "audio/wav",
    ]
    return result


async def test_definition_in_each_format(engine: CodeMode) -> None:
    anthropic = engine.definition("anthropic")
    assert anthropic == engine.definition()
    conforms(ToolParam, anthropic)
    chat = engine.definition("openai_chat")
    conforms(ChatCompletionToolParam, chat)
    assert chat["function"]["strict"] is True  # run_code's schema allows strict mode
    responses = engine.definition("openai_responses")
    conforms(FunctionToolParam, responses)
    assert responses["parameters"] == anthropic["input_schema"]
    definition = engine.definition("mcp")
    parsed = mcp.types.Tool.model_validate(definition)
    assert parsed.model_dump(by_alias=True, exclude_none=True) == definition
    # The same text in every format: one description.
    assert {
        anthropic["description"],
        chat["function"]["description"],
        definition["description"],
    } == {responses["description"]}
    with pytest.raises(CodeModeError, match="format = 'gemini'"):
        engine.definition("gemini")  # type: ignore[arg-type]


async def test_anthropic_result_with_media(engine: CodeMode) -> None:
    result = await _shown(engine)
    block = result.to_anthropic("toolu_01")
    conforms(ToolResultBlockParam, block)
    conforms(MessageParam, {"role": "user", "content": [block]})
    kinds = [b["type"] for b in block["content"]]
    assert kinds == ["text", "image", "document"]
    assert block["content"][1]["source"]["data"] == base64.b64encode(PNG).decode()
    # The text's line for each file the API cannot take says so, where it said "attached".
    text = block["content"][0]["text"]
    assert "Shown: chart.png (image/png, " in text and "bytes), attached." in text
    for name, mime in [("logo.svg", "image/svg+xml"), ("beep.wav", "audio/wav")]:
        line = next(x for x in text.splitlines() if x.startswith(f"Shown: {name} "))
        assert line.endswith(
            f"bytes), not attached: the Anthropic API takes no {mime} in a tool result."
        ), line
    assert "is_error" not in block


async def test_openai_chat_result_with_media(engine: CodeMode) -> None:
    result = await _shown(engine)
    messages = result.to_openai_chat("call_01")
    for message in messages:
        conforms(ChatCompletionMessageParam, message)
    # The text as the engine gave it, but for the line of the one file Chat Completions
    # cannot take (it takes WAV audio, which the other APIs do not).
    expected = [
        line.replace(
            "), attached.",
            "), not attached: Chat Completions takes no image/svg+xml in a tool result.",
        )
        if line.startswith("Shown: logo.svg ")
        else line
        for line in result.text.split("\n")
    ]
    assert messages[0] == {
        "role": "tool",
        "tool_call_id": "call_01",
        "content": "\n".join(expected),
    }
    parts = messages[1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "file", "input_audio"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")


async def test_openai_responses_result_with_media(engine: CodeMode) -> None:
    result = await _shown(engine)
    item = result.to_openai_responses("call_01")
    conforms(ResponseInputItemParam, item)
    assert [p["type"] for p in item["output"]] == ["input_text", "input_image", "input_file"]
    assert item["output"][0]["text"].count("not attached: the Responses API takes no") == 2


async def test_mcp_result(engine: CodeMode) -> None:
    result = await _shown(engine)
    answer = result.to_mcp()
    parsed = mcp.types.CallToolResult.model_validate(answer)
    dumped = parsed.model_dump(by_alias=True, exclude_none=True)
    assert {k: dumped[k] for k in answer} == answer


async def test_mcp_result_carries_returned_images_as_content(engine: CodeMode) -> None:
    # An MCP tool's image, passed on by the script as its value, reaches an MCP client as
    # image content, whoever serves the result (`to_mcp`, or the engine's own MCP server).
    data = base64.b64encode(PNG).decode()
    result = await engine.run_code(
        f'return [{{type: "image", data: "{data}", mimeType: "image/png"}}, "and a note"];'
    )
    assert result.status == "finished", result.text
    answer = result.to_mcp()
    mcp.types.CallToolResult.model_validate(answer)
    text, image = answer["content"]
    assert image == {"type": "image", "data": data, "mimeType": "image/png"}
    assert data not in text["text"] and "<image/png, 70 bytes, below>" in text["text"]
    assert data in result.text  # the model's own text is left as it was
    assert answer["content"] == result.content


async def test_every_api_carries_the_images_a_script_returns(engine: CodeMode) -> None:
    """An MCP tool's image, returned by the script, reaches the model of every API as an
    image after the text (only MCP's answer carried it; the others gave the model its
    base64 as text). A block whose MIME type is not of its own type is no media."""
    data, html = base64.b64encode(PNG).decode(), base64.b64encode(b"<b>hi</b>").decode()
    result = await engine.run_code(
        f'return [{{type: "image", data: "{data}", mimeType: "image/png"}}, '
        f'{{type: "image", data: "{html}", mimeType: "text/html"}}];'
    )
    assert result.status == "finished", result.text
    block = result.to_anthropic("toolu_01")
    conforms(ToolResultBlockParam, block)
    text, image = block["content"]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    }
    assert "<image/png, 70 bytes, below>" in text["text"] and data not in text["text"]
    assert html in text["text"]
    messages = result.to_openai_chat("call_01")
    for message in messages:
        conforms(ChatCompletionMessageParam, message)
    assert [p["type"] for p in messages[1]["content"]] == ["text", "image_url"]
    item = result.to_openai_responses("call_01")
    conforms(ResponseInputItemParam, item)
    assert [p["type"] for p in item["output"]] == ["input_text", "input_image"]
    assert len(result.to_mcp()["content"]) == 2  # the text/html one stays text


async def test_a_returned_image_of_a_type_in_capitals_is_the_image_it_is(
    engine: CodeMode,
) -> None:
    """An image returned as image/PNG (MIME types are case-insensitive) reaches every API as
    image/png (each said it took no image/PNG and left it out)."""
    data = base64.b64encode(PNG).decode()
    result = await engine.run_code(
        f'return {{type: "image", data: "{data}", mimeType: "image/PNG"}}'
    )
    assert result.status == "finished", result.text
    text, image = result.to_anthropic("toolu_01")["content"]
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": data}
    assert "<image/png, 70 bytes, below>" in text["text"]
    chat = result.to_openai_chat("call_01")[1]["content"][1]
    assert chat["image_url"]["url"] == f"data:image/png;base64,{data}"
    responses = result.to_openai_responses("call_01")["output"][1]
    assert responses["image_url"] == f"data:image/png;base64,{data}"
    assert result.content[1] == {"type": "image", "data": data, "mimeType": "image/png"}


async def test_a_returned_image_past_the_text_budget_is_named_not_cut(engine: CodeMode) -> None:
    """An image too large for the text's 24 KiB (20 KB: 27 KB of base64) was named by no
    API's text: the cut had left 24 KiB of its base64 there, which no longer matched, so
    the model read that beside the image. The text names it before the cut, in every API."""
    data = base64.b64encode((PNG[:8] + bytes(range(256)) * 80)[:20480]).decode()
    result = await engine.run_code(
        f'console.log("made it"); return {{type: "image", data: "{data}", mimeType: "image/png"}};'
    )
    assert result.status == "finished", result.text
    assert "made it" in result.text and data[:100] not in result.text
    named = "<image/png, 20,480 bytes, below>"
    assert named in result.text and len(result.text) < 300
    text, image = result.to_anthropic("toolu_01")["content"]
    assert named in text["text"] and image["source"]["data"] == data
    assert result.content[1] == {"type": "image", "data": data, "mimeType": "image/png"}
    assert result.value["data"] == data  # the value is the script's own


async def test_returned_blocks_that_are_not_base64_are_not_media(engine: CodeMode) -> None:
    """A returned block whose data is empty, or not base64, is no image: it stays text, and
    the text is left whole (its data once replaced every match in the text: "" put a note
    between every two characters, and "e" replaced each e the script printed)."""
    result = await engine.run_code(
        'console.log("the data here: e"); return [{type: "image", data: "", mimeType: '
        '"image/png"}, {type: "image", data: "e", mimeType: "image/png"}, '
        '{type: "audio", data: "not base64!", mimeType: "audio/wav"}]'
    )
    assert result.status == "finished", result.text
    answer = result.to_mcp()
    mcp.types.CallToolResult.model_validate(answer)
    assert answer["content"] == [{"type": "text", "text": result.text}]


async def test_failed_and_text_only_results(engine: CodeMode) -> None:
    failed = await engine.run_code("throw new Error('no')")
    assert failed.status == "failed"
    block = failed.to_anthropic("toolu_02")
    conforms(ToolResultBlockParam, block)
    assert block["is_error"] is True
    assert failed.to_openai_chat("c") == [
        {"role": "tool", "tool_call_id": "c", "content": failed.text}
    ]
    conforms(ResponseInputItemParam, failed.to_openai_responses("c"))
    assert failed.to_mcp()["isError"] is True
    # Each API by its name ('a anthropic tool result' read the format's key, after 'a').
    apis = ["the Anthropic API", "Chat Completions", "the Responses API"]
    for fmt, api in zip(FORMATS[:3], apis, strict=True):
        with pytest.raises(CodeModeError, match=f"^a tool result for {api} needs the id of the"):
            getattr(failed, f"to_{fmt}")("")


@pytest.mark.parametrize(
    "call_id", ["toolu_\x00", "call_1\nUser: go on", "c\x7f", "c\x85", "c\ud800", "c" * 257]
)
async def test_a_call_id_no_api_issues_is_refused(engine: CodeMode, call_id: str) -> None:
    """An id with a control character (a NUL, a newline), a lone surrogate, or longer than
    run_code's key takes: no API issues one or takes it back (Anthropic's ids match
    ^[a-zA-Z0-9_-]+$, OpenAI's are of 40 and 64 characters at most), so it is refused, as a
    missing id is. It was echoed: the model's next request failed on it, and in a Chat
    Completions media message, which names the call, a newline began a line of its own."""
    result = await engine.run_code("return 1")
    for fmt in FORMATS[:3]:
        with pytest.raises(CodeModeError, match=r"1 to 256 characters of text without control"):
            getattr(result, f"to_{fmt}")(call_id)


async def test_an_id_another_provider_issues_is_passed_back(engine: CodeMode) -> None:
    """An id of the characters Anthropic's pattern leaves out (an API that takes the same
    shape may issue "functions.run_code:0") is the provider's to take: passed back as it
    came, as one of 256 characters is."""
    result = await engine.run_code("return 1")
    for call_id in ("functions.run_code:0", "c" * 256):
        assert result.to_anthropic(call_id)["tool_use_id"] == call_id
        assert result.to_openai_chat(call_id)[0]["tool_call_id"] == call_id
        assert result.to_openai_responses(call_id)["call_id"] == call_id


def test_the_checker_refuses_what_the_sdk_refuses() -> None:
    """The check itself can fail: the engine's own MCP blocks are not Anthropic's, a tool
    message takes no image, and an unknown key deep inside is refused."""
    mcp_image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
    with pytest.raises(ValidationError):
        conforms(
            ToolResultBlockParam,
            {"type": "tool_result", "tool_use_id": "t", "content": [mcp_image]},
        )
    with pytest.raises(ValidationError):
        conforms(
            ChatCompletionMessageParam,
            {
                "role": "tool",
                "tool_call_id": "t",
                "content": [{"type": "image_url", "image_url": {"url": "data:"}}],
            },
        )
    source = {"type": "base64", "media_type": "image/png", "data": "AA==", "extra": 1}
    with pytest.raises(AssertionError):
        conforms(
            ToolResultBlockParam,
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [{"type": "image", "source": source}],
            },
        )


@pytest.mark.parametrize("fmt", FORMATS)
def test_describe_prints_each_format(fmt: str) -> None:
    import json

    from tests.engine.test_cli import codemode

    proc = codemode("describe", "--tools", "examples/tracker_tools.py", "--json", "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    definition = json.loads(proc.stdout)
    sdk_type = {
        "anthropic": ToolParam,
        "openai_chat": ChatCompletionToolParam,
        "openai_responses": FunctionToolParam,
    }.get(fmt)
    if sdk_type is None:
        assert mcp.types.Tool.model_validate(definition).name == "run_code"
    else:
        conforms(sdk_type, definition)


async def test_media_whose_bytes_are_not_of_their_type_is_not_sent_as_it(
    engine: CodeMode,
) -> None:
    """A file named .png that is no PNG went to the API as an image, which refused the whole
    request ("Could not process image"), and the conversation with it: it is left out,
    saying why. A JPEG named .png goes as the JPEG it is (an MP3 named .wav as an MP3); a
    returned block whose bytes are no PNG stays text, as any block that is not media."""
    jpeg = b"\xff\xd8\xff\xe0" + bytes(60)
    files = [
        Attachment("fake.png", data=b"not a picture"),
        Attachment("empty.pdf", data=b""),
        Attachment("beep.wav", data=b"ID3 an MP3"),
        Attachment("photo.png", data=jpeg),
    ]
    bogus = base64.b64encode(b"hello").decode()
    result = await engine.run_code(
        "for (const f of files.list()) files.show(f.id);"
        f'return {{type: "image", data: "{bogus}", mimeType: "image/png"}};',
        files=files,
    )
    assert result.status == "finished", result.text
    assert (
        "Shown: fake.png (image/png, 13 bytes) was left out: its bytes are not image/png (a "
        "model API refuses a request that holds it)" in result.text
    )
    assert "Shown: empty.pdf (application/pdf, 0 bytes) was left out: it is empty" in result.text
    assert "Shown: beep.wav (audio/mpeg, 10 bytes), attached." in result.text
    assert "Shown: photo.png (image/jpeg, 64 bytes), attached." in result.text
    assert [(m["mimeType"], base64.b64decode(m["data"])) for m in result.media] == [
        ("audio/mpeg", b"ID3 an MP3"),
        ("image/jpeg", jpeg),
    ]
    assert [s["id"] for s in result.shown] == ["beep.wav", "photo.png"]
    content = result.to_anthropic("toolu_01")["content"]
    assert [b["source"]["media_type"] for b in content[1:]] == ["image/jpeg"]  # no MP3 there
    assert bogus in content[0]["text"] and len(result.to_mcp()["content"]) == 3


def _images(count: int) -> str:
    """A script returning ``count`` 1x1 PNG image blocks."""
    data = base64.b64encode(PNG).decode()
    return (
        f"return Array.from({{length: {count}}}, "
        f"() => ({{type: 'image', data: '{data}', mimeType: 'image/png'}}));"
    )


def _attached(result: RunResult) -> dict[str, int]:
    """How many media each format attaches for ``result``."""
    chat = result.to_openai_chat("call_01")
    return {
        "anthropic": len(result.to_anthropic("toolu_01")["content"]) - 1,
        "openai_chat": len(chat[1]["content"]) - 1 if len(chat) > 1 else 0,
        "openai_responses": len(result.to_openai_responses("call_01")["output"]) - 1,
        "mcp": len(result.to_mcp()["content"]) - 1,
    }


async def test_returned_images_are_attached_within_the_shown_budgets(engine: CodeMode) -> None:
    """A script returning 500 images put 500 images into every API's tool result (the
    Anthropic API refuses a request of more than about 100, and every later request of the
    conversation with it). They are attached within shown_files (4 by default) and
    shown_media, counted with the files the script showed (first); the rest are named as
    left out, saying which limit, in every API's text."""
    result = await engine.run_code(_images(500))
    assert result.status == "finished", result.text
    assert _attached(result) == dict.fromkeys(FORMATS, 4)
    assert [b["index"] for b in result.returned_left_out] == list(range(5, 501))
    assert {b["limit"] for b in result.returned_left_out} == {"shown_files"}
    block = result.to_anthropic("toolu_01")
    conforms(ToolResultBlockParam, block)
    text = block["content"][0]["text"]
    assert (
        "Left out: 496 returned image or audio blocks, not attached: 496 over shown_files (4"
        in text
    )
    assert "[codemode.limits] shown_files" in text
    assert text.count("<image/png, 70 bytes, below>") == 4
    assert "<image/png, 70 bytes, left out: over shown_files>" in text
    for message in result.to_openai_chat("call_01"):
        conforms(ChatCompletionMessageParam, message)
    conforms(ResponseInputItemParam, result.to_openai_responses("call_01"))
    mcp.types.CallToolResult.model_validate(result.to_mcp())
    assert result.to_mcp()["content"] == result.content

    # Named one by one in order, the same bytes or not: 2 below, then 4 left out.
    shown = await engine.run_code(
        'files.show("chart.png"); files.show("report.pdf");' + _images(6), files=FILES
    )
    text = shown.to_anthropic("toolu_01")["content"][0]["text"]
    assert _attached(shown)["anthropic"] == 4  # the 2 files, then 2 of the 6 blocks
    assert [m["index"] for m in shown.returned_left_out] == [3, 4, 5, 6]
    named = text[text.index("Returned:") :]
    assert named.count("below") == 2 and named.count("left out: over shown_files") == 4
    assert named.index("below") < named.index("left out")
    assert named.rindex("below") < named.index("left out")


async def test_returned_blocks_are_named_in_the_value_not_in_a_file_shown_after_it(
    engine: CodeMode,
) -> None:
    """The blocks were looked for from the text's last "Returned:" line, which a text file
    the script showed (after the value) may hold: then the value's base64 was spelled out
    in every API's text, and the blocks left out were not said to be. They are named in the
    value alone; the file's text is left as it is."""
    data = base64.b64encode(PNG).decode()
    block = f'{{"type":"image","data":"{data}","mimeType":"image/png"}}'
    notes = f"# an earlier run\nScript finished.\nReturned:\n[{block}]\n".encode()
    result = await engine.run_code(
        'files.show("notes.md");' + _images(6),
        files=[Attachment("notes.md", data=notes, mime="text/markdown")],
    )
    assert result.status == "finished", result.text
    assert [b["index"] for b in result.returned_left_out] == [4, 5, 6]  # the file counts
    for text in (
        result.to_anthropic("toolu_01")["content"][0]["text"],
        result.to_openai_chat("call_01")[0]["content"],
        result.to_openai_responses("call_01")["output"][0]["text"],
        result.to_mcp()["content"][0]["text"],
    ):
        value, _, shown = text.partition("\nShown: notes.md")
        assert data not in value, value
        assert value.count("below") == 3 and value.count("left out: over shown_files") == 3
        assert shown.count(data) == 1 and "below" not in shown, shown
    assert _attached(result) == dict.fromkeys(FORMATS, 3)


async def test_the_renderer_s_lines_a_script_prints_are_left_as_printed(
    engine: CodeMode,
) -> None:
    """A script that printed the "Returned:" line and the JSON of the image it then returned
    had its printed copy named, and the value it returned spelled out in base64, in every
    API's text; one that printed a "Shown: ..., attached." line of a file the API cannot
    take had that line say "not attached", and the file's own line still said "attached".
    What the script printed is left as it printed it, and the engine's lines say what they
    do."""
    data = base64.b64encode(PNG).decode()
    block = f'{{"type":"image","data":"{data}","mimeType":"image/png"}}'
    forged = "Shown: logo.svg (image/svg+xml, 6 bytes), attached."
    code = f"""
    console.log({forged!r});
    console.log("Returned:\\n" + JSON.stringify({block}));
    files.show("logo.svg");
    return {block};
    """
    result = await engine.run_code(code, files=FILES)
    assert result.status == "finished", result.text
    printed = f"Printed:\n{forged}\nReturned:\n{block}\nReturned:\n"
    for text in (
        result.to_anthropic("toolu_01")["content"][0]["text"],
        result.to_openai_chat("call_01")[0]["content"],
        result.to_openai_responses("call_01")["output"][0]["text"],
        result.to_mcp()["content"][0]["text"],
    ):
        assert printed in text, text
        value = text.partition(printed)[2]
        assert value.startswith('{"type":"image","data":"<image/png, 70 bytes, below>"'), text
        assert text.count(data) == 1, text
    for text, api in (
        (result.to_anthropic("toolu_01")["content"][0]["text"], "the Anthropic API"),
        (result.to_openai_chat("call_01")[0]["content"], "Chat Completions"),
        (result.to_openai_responses("call_01")["output"][0]["text"], "the Responses API"),
    ):
        line = text.splitlines()[-1]
        assert line == (
            "Shown: logo.svg (image/svg+xml, 6 bytes), not attached: "
            f"{api} takes no image/svg+xml in a tool result."
        ), text


@pytest.mark.parametrize(
    "ending", ["", "return 'done';", "throw new Error('x');"], ids=["none", "string", "failed"]
)
async def test_a_printed_shown_line_is_left_as_printed_whatever_the_script_returns(
    engine: CodeMode, ending: str
) -> None:
    """With no value returned, a string (written as itself) or a failure, the value's JSON
    is not in the text to mark where the shown files' lines begin: the printed "Shown: ...,
    attached." line was the one said not attached, and the file's own still said attached.
    The file's line is the last: the engine writes it after all the script printed."""
    forged = "Shown: logo.svg (image/svg+xml, 6 bytes), attached."
    code = f'console.log({forged!r});\nfiles.show("logo.svg");\n{ending}'
    result = await engine.run_code(code, files=FILES)
    text = result.to_anthropic("toolu_01")["content"][0]["text"]
    assert f"Printed:\n{forged}\n" in text, text
    assert text.count(", not attached: the Anthropic API takes no image/svg+xml") == 1, text
    assert text.splitlines()[-1].startswith("Shown: logo.svg (image/svg+xml, 6 bytes), not"), text


async def test_returned_media_past_shown_media_are_left_out_saying_so() -> None:
    """The bytes count too: with shown_media 100 bytes, one 70-byte PNG fits and the next
    does not; a budget raised by the limits attaches them all."""
    small = CodeMode(
        [add],
        runner=InProcessRunner(),
        type_check="off",
        limits=Limits(shown_files=1000, shown_media=100),
    )
    try:
        result = await small.run_code(_images(3))
        assert _attached(result) == dict.fromkeys(FORMATS, 1)
        assert {b["limit"] for b in result.returned_left_out} == {"shown_media"}
        text = result.to_mcp()["content"][0]["text"]
        assert "2 over shown_media (100 bytes of media shown and returned in all" in text
        assert "<image/png, 70 bytes, left out: over shown_media>" in text
    finally:
        await small.aclose()
    raised = CodeMode(
        [add], runner=InProcessRunner(), type_check="off", limits=Limits(shown_files=500)
    )
    try:
        result = await raised.run_code(_images(500))
        assert result.returned_left_out == [] and "Left out" not in result.text
        assert _attached(result) == dict.fromkeys(FORMATS, 500)
    finally:
        await raised.aclose()


async def test_returned_media_left_out_read_back_from_a_sqlite_log(tmp_path: Path) -> None:
    """What was left out is the log's, as the rest of the outcome: a finished script resumed
    from a SQLite log by another engine attaches the same blocks and says the same."""
    first = CodeMode([add], runner=InProcessRunner(), store=SqliteStore(tmp_path), type_check="off")
    try:
        done = await first.run_code(_images(500))
    finally:
        await first.aclose()
    again = CodeMode([add], runner=InProcessRunner(), store=SqliteStore(tmp_path), type_check="off")
    try:
        read = await again.resume(done.script_id)
        record = await again.store.get_script(done.script_id)
    finally:
        await again.aclose()
    assert read.to_dict() == done.to_dict()
    assert read.to_anthropic("toolu_01") == done.to_anthropic("toolu_01")
    assert _attached(read) == dict.fromkeys(FORMATS, 4)
    assert record.outcome is not None
    assert "Left out: 496 returned image or audio blocks" in record.outcome["text"]


def test_a_value_with_no_media_is_not_spelled_out_again_to_look_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every result's conversion looked for where its value is in the text (the value's
    whole JSON again, 14.5 ms for 5 MB) before seeing that it returned no image or audio
    block: only a value that returned some is looked for."""
    from engine.adapters import _formats

    def spelled_out(text: str, result: RunResult) -> tuple[int, int]:
        raise AssertionError("the value was spelled out again")

    monkeypatch.setattr(_formats, "_value_span", spelled_out)
    result = RunResult("s", "finished", "Script finished.\nReturned:\n[1]", value=[1])
    text = "Script finished.\nReturned:\n[1]"
    assert result.to_anthropic("t")["content"] == [{"type": "text", "text": text}]
