"""Attachments through the engine: recorded as blobs, read by every run, shown to the model."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from engine import CodeMode, Limits, tool
from engine._files import Attachment, BlobStore
from tests.engine.conftest import InProcessRunner

SALES = b"region,amount\nnorth,10\nsouth,5\nnorth,7\n"


async def test_script_reads_attachments_and_shows_them(inproc: InProcessRunner) -> None:
    """The spec's CSV example over an attachment; shown text and media reach the result."""
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 100
    engine = CodeMode([], runner=inproc)
    code = """
    const totals = {};
    for await (const row of files.csv("sales.csv")) {
        totals[row.region] = (totals[row.region] ?? 0) + Number(row.amount);
    }
    files.show("notes.md");
    files.show("chart.png");
    return totals;
    """
    result = await engine.run_code(
        code,
        files=[
            Attachment("sales.csv", data=SALES),
            Attachment("notes.md", data=b"# Q3\nall good\n"),
            Attachment("chart.png", data=png),
        ],
    )
    assert result.status == "finished", result.text
    assert result.value == {"north": 17, "south": 5}
    assert "Shown: notes.md (text/markdown, 14 bytes)\n# Q3\nall good" in result.text
    assert "Shown: chart.png (image/png" in result.text
    image = result.content[1]
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]) == png


async def test_every_run_reads_the_recorded_bytes(inproc: InProcessRunner, tmp_path: Path) -> None:
    """Files are recorded when the script starts: a later run reads the same bytes even if
    the attachment's file changed on disk."""
    path = tmp_path / "data.csv"
    path.write_bytes(SALES)

    @tool
    def touch() -> str:
        """Change the file on disk mid-script."""
        path.write_bytes(b"region,amount\nwest,1000\n")
        return "changed"

    engine = CodeMode([touch], runner=inproc, data_dir=tmp_path / "data")
    code = """
    const before = await files.text("data.csv");
    await tools.touch();
    const after = await files.text("data.csv");
    return before === after;
    """
    result = await engine.run_code(code, files=[Attachment("data.csv", path=path)])
    assert result.value is True
    assert len(list((tmp_path / "data" / "blobs").rglob("*"))) >= 1


async def test_gone_blob_throws_in_the_script(inproc: InProcessRunner) -> None:
    """A file whose bytes are gone from the store (after the script started) throws in the
    script, which can catch it."""
    blobs = BlobStore()

    @tool
    def purge() -> int:
        """Lose every blob, as a store that expired them would."""
        blobs._memory.clear()
        return 0

    engine = CodeMode([purge], runner=inproc, blobs=blobs)
    code = "await tools.purge(); try { await files.text('a.txt') } catch (e) { return e.message }"
    result = await engine.run_code(code, files=[Attachment("a.txt", data=b"hello")])
    assert result.value == "a.txt is gone: its bytes are gone from the store"


async def test_total_file_bytes_limit(inproc: InProcessRunner) -> None:
    """total_file_bytes: file bytes over all of a script's runs pass the limit."""

    @tool
    def step() -> int:
        """A step."""
        return 1

    engine = CodeMode([step], runner=inproc, limits=Limits(total_file_bytes=200))
    code = "for (let i = 0; i < 10; i++) { await files.text('sales.csv'); await tools.step(); }"
    result = await engine.run_code(code, files=[Attachment("sales.csv", data=SALES)])
    assert result.status == "failed"
    assert result.limit == "total_file_bytes"
    assert "total_file_bytes limit met" in result.text and "[codemode.limits]" not in result.text


async def test_file_bytes_limit_through_the_engine(inproc: InProcessRunner) -> None:
    """file_bytes: one run reading more than the limit fails, naming it."""
    engine = CodeMode([], runner=inproc, limits=Limits(file_bytes=10))
    result = await engine.run_code(
        "return await files.text('sales.csv')", files=[Attachment("sales.csv", data=SALES)]
    )
    assert result.limit == "file_bytes" and "file_bytes limit met" in result.text


async def test_files_through_the_confined_process() -> None:
    """The real process reads attachments through the runner's read exchange: CSV, xlsx,
    a missing file, and a shown file, in one script."""
    import io

    import openpyxl

    from runner import ProcessRunner

    book = openpyxl.Workbook()
    book.active.append(["sku", "count"])
    book.active.append(["a-1", 3])
    buffer = io.BytesIO()
    book.save(buffer)
    code = """
    const totals = {};
    for await (const row of files.csv("sales.csv")) totals[row.region] = (totals[row.region] ?? 0) + Number(row.amount);
    const stock = [];
    for await (const row of files.xlsx("stock.xlsx")) stock.push(row);
    let missing;
    try { files.stat("nope.csv") } catch (e) { missing = e.message }
    files.show("sales.csv");
    return { totals, stock, missing };
    """
    async with ProcessRunner() as runner:
        engine = CodeMode([], runner=runner)
        result = await engine.run_code(
            code,
            files=[
                Attachment("sales.csv", data=SALES),
                Attachment("stock.xlsx", data=buffer.getvalue()),
            ],
        )
    assert result.status == "finished", result.text
    assert result.value["totals"] == {"north": 17, "south": 5}
    assert result.value["stock"] == [{"sku": "a-1", "count": 3}]
    assert "no file 'nope.csv'" in result.value["missing"]
    assert "Shown: sales.csv (text/csv" in result.text


async def test_bad_attachments_are_refused_before_anything_is_recorded(
    inproc: InProcessRunner, tmp_path: Path
) -> None:
    """An attachment with no bytes, text for bytes, no id or an id no log keeps (a NUL, a
    lone surrogate: PostgreSQL's DataError) is refused when made; one with an
    unreadable path, a duplicate id or something that is not an Attachment is refused by
    run_code, naming it; no script is recorded. So is a mime or skill that is not text (it
    was recorded, then every step of the script failed on a ValidationError or a TypeError),
    and files given as one Attachment rather than a list (a TypeError: not iterable)."""
    from engine import CodeModeError, ConfigError

    for made, expected in (
        (lambda: Attachment("a.txt"), "neither data nor a path"),
        (lambda: Attachment("a.txt", data=b"1", path="a.txt"), "both data and a path"),
        (lambda: Attachment("a.txt", data="text"), "not bytes; for text, pass text.encode"),
        (lambda: Attachment("", data=b""), "needs an id"),
        (lambda: Attachment("a\x00.txt", data=b""), "has a NUL or a lone surrogate"),
        (lambda: Attachment("a\udc80.txt", data=b""), "has a NUL or a lone surrogate"),
        (lambda: Attachment("a.txt", data=b"", mime=5), "mime is 5; give text"),  # type: ignore[arg-type]
        (lambda: Attachment("a.txt", data=b"", mime="text/\ud800"), "mime is 'text/"),
        (lambda: Attachment("a.txt", data=b"", mime="text/\x00"), "without a NUL"),
        (lambda: Attachment("a.txt", data=b"", skill=["s"]), "skill is \\['s'\\]"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigError, match=expected):
            made()
    engine = CodeMode([], runner=inproc)
    cases = {
        "cannot read attachment 'b.txt'": [Attachment("b.txt", path=tmp_path / "missing")],
        "two attachments have the id 'c.txt'": [
            Attachment("c.txt", data=b"1"),
            Attachment("c.txt", data=b"2"),
        ],
        "not str": ["d.txt"],
        r"pass \[attachment\], not 'e.txt'": Attachment("e.txt", data=b"1"),
        "a list of Attachment objects, not int": 5,
    }
    for expected, files in cases.items():
        with pytest.raises(CodeModeError, match=expected):
            await engine.run_code("return 1", files=files)  # type: ignore[arg-type]
    assert await engine.store.scripts() == []
