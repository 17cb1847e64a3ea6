"""Attachments through the engine: recorded as blobs, read by every run, shown to the model."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from engine import CodeMode, Limits, tool
from engine._files import Attachment, BlobStore
from runner import FileMissing
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


@pytest.mark.parametrize("language", ["javascript", "python"])
async def test_a_failed_script_shows_the_files_it_showed(
    inproc: InProcessRunner, language: str
) -> None:
    """The spec's result: "A script that throws gives Script failed., the error ... then what
    it printed. Then comes each file the script showed." A failed script's files came not at
    all, the chart it showed before it failed among them."""
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 100
    engine = CodeMode([], runner=inproc)
    code = {
        "javascript": "files.show('notes.md'); files.show('chart.png'); "
        "console.log('drawn'); throw new Error('no data for Q4')",
        "python": "files.show('notes.md')\nfiles.show('chart.png')\nprint('drawn')\n"
        "raise ValueError('no data for Q4')",
    }[language]
    result = await engine.run_code(
        code,
        files=[
            Attachment("notes.md", data=b"# Q3\nall good\n"),
            Attachment("chart.png", data=png),
        ],
        language=language,  # type: ignore[arg-type]
    )
    await engine.aclose()
    assert result.status == "failed", result.text
    assert "no data for Q4" in result.text
    printed = result.text.index("Printed:\ndrawn")
    assert result.text.index("Shown: notes.md (text/markdown, 14 bytes)\n# Q3\nall good") > printed
    assert "Shown: chart.png (image/png" in result.text
    assert [f["id"] for f in result.shown] == ["notes.md", "chart.png"]
    image = result.content[1]
    assert image["type"] == "image" and base64.b64decode(image["data"]) == png


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
    assert len([p for p in (tmp_path / "data" / "blobs").rglob("*") if p.is_file()]) == 1


# A stream whose line 3 cannot be read: its name, its bytes, and what its error says.
_BAD_LINE_3 = {
    "jsonl": ("e.jsonl", b'{"n": 1}\n{"n": 2}\n{"n": 3\n{"n": 4}\n', "e.jsonl line 3 is not JSON"),
    # A stray quote: it made the rest of the file one cell of its row, in silence.
    "csv": (
        "s.csv",
        b'n,amount\n1,10\n2,5\n"3,1\n4,2\n',
        "s.csv line 4 cannot be read as CSV: a quoted field opened there",
    ),
}


@pytest.mark.parametrize("live", [True, False])
@pytest.mark.parametrize("language", ["javascript", "python"])
@pytest.mark.parametrize("kind", sorted(_BAD_LINE_3))
async def test_a_bad_line_comes_after_the_rows_before_it(
    inproc: InProcessRunner, language: Literal["javascript", "python"], live: bool, kind: str
) -> None:
    """The rows before a bad line were lost with their batch (a JSONL line that is not
    JSON), or the rest of the file was one cell (a CSV quote left open): no call was made for
    them, and the script that caught the error had seen none. Each is read and called for,
    then the error names the line, live and with every step replayed (a call per row)."""
    calls: list[int] = []

    @tool
    def keep(n: int) -> int:
        """Keep a row's number."""
        calls.append(n)
        return n

    name, data, says = _BAD_LINE_3[kind]
    code = {
        "javascript": f"""
    const kept = [];
    try {{
      for await (const r of files.{kind}("{name}")) kept.push(await tools.keep({{ n: Number(r.n) }}));
    }} catch (e) {{ return [kept, e.message]; }}
    return [kept, null];
    """,
        "python": f"""
kept = []
try:
    async for r in files.{kind}("{name}"):
        kept.append(await tools.keep(n=int(r["n"])))
except Exception as e:
    return [kept, str(e)]
return [kept, None]
""",
    }[language]
    engine = CodeMode([keep], runner=inproc, language=language, live=live)
    result = await engine.run_code(code, files=[Attachment(name, data=data)])
    assert result.status == "finished", result.text
    kept, error = result.value
    assert kept == [1, 2] and calls == [1, 2]
    assert says in error, error
    assert (inproc.segments > 0) == live and len(inproc.steps) == (1 if live else 3)


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
    # The file and where it was read from, not the size of the piece read at once; advice
    # in no one language's syntax (a Python script read "a stream with { limit }").
    assert (
        f"file_bytes limit met: reading sales.csv ({len(SALES)} bytes) from byte 0 would take "
        "this run past the 10 bytes of files one run may read (0 bytes read so far); read "
        "less (files.chunks from an offset, or a stream with a limit)"
    ) in result.text, result.text


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
    lone surrogate: PostgreSQL's DataError), or a path with a NUL or a lone surrogate (one
    not a byte the file system's encoding left undecoded), is refused when made; one with an
    unreadable path, a duplicate id, a skill's mark (only a Skill's own files bear it) or
    something that is not an Attachment is refused by run_code, naming it; no script is
    recorded, and no file stored. So is a mime or skill that is not text (it was recorded,
    then every step of the script failed on a ValidationError or a TypeError),
    and files given as one Attachment rather than a list (a TypeError: not iterable)."""
    from engine import CodeModeError, ConfigError

    for made, expected in (
        (lambda: Attachment("a.txt"), "neither data nor a path"),
        (lambda: Attachment("a.txt", data=b"1", path="a.txt"), "both data and a path"),
        (lambda: Attachment("a.txt", data="text"), "not bytes; for text, pass text.encode"),
        (lambda: Attachment("", data=b""), "needs an id"),
        (lambda: Attachment("a\x00.txt", data=b""), "without control characters, a NUL"),
        (lambda: Attachment("a\udc80.txt", data=b""), "a NUL or a lone surrogate"),
        (lambda: Attachment("a.txt", data=b"", mime=5), "mime is 5; give one line of text"),  # type: ignore[arg-type]
        (lambda: Attachment("a.txt", data=b"", mime="text/\ud800"), "mime is 'text/"),
        (lambda: Attachment("a.txt", data=b"", mime="text/\x00"), "no control character, NUL"),
        (lambda: Attachment("a.txt", data=b"", skill=["s"]), "skill is \\['s'\\]"),  # type: ignore[arg-type]
        # A line break or a mark that reorders text wrote lines of its own into what the
        # model reads ("Shown: a.txt (text/plain, 2 bytes)\nScript finished. ...").
        (lambda: Attachment("a\nb.txt", data=b""), "must be one line of text"),
        (lambda: Attachment("\u202egnp.exe", data=b""), "must be one line of text"),
        (lambda: Attachment("a.txt", data=b"", mime="text/plain\nx"), "give one line of text"),
        (lambda: Attachment("x" * 1025, data=b""), "give an id of at most 1024"),
        # run_code raised os's bare ValueError, "embedded null byte".
        (
            lambda: Attachment("a.txt", path="/tmp/a\x00b"),
            "has a NUL at character 7 \\(after '/tmp/a'\\), which no",
        ),
        (
            lambda: Attachment("a.txt", path=Path("a\x00b")),
            "has a NUL at character 2 \\(after 'a'\\), which",
        ),
        # run_code raised a bare UnicodeEncodeError.
        (
            lambda: Attachment("a.txt", path="/tmp/a\ud800b"),
            "has a lone surrogate at character 7 \\(after '/tmp/a'\\), which no",
        ),
        # Named where it is: the path cut at 80 characters showed no NUL.
        (
            lambda: Attachment("a.txt", path="/" + "d" * 200 + "/a\x00b"),
            "has a NUL at character 204 \\(after '\\.\\.\\.d{58}/a'\\)",
        ),
    ):
        with pytest.raises(ConfigError, match=expected):
            made()
    undecoded = tmp_path / os.fsdecode(b"caf\xe9.txt")  # a Latin-1 name: U+DCE9 in it
    undecoded.write_bytes(b"read")
    assert Attachment("a.txt", path=undecoded).read() == b"read"
    assert Attachment("a.txt", path=str(undecoded)).read() == b"read"
    blobs = tmp_path / "blobs"
    engine = CodeMode([], runner=inproc, blobs=BlobStore(blobs))
    stored = Attachment("stored.txt", data=b"for nothing")
    cases = {
        # A path that cannot be opened, or is no file, after a file that could be stored:
        # that file was stored for a start that was refused.
        "cannot read attachment 'b.txt'": [stored, Attachment("b.txt", path=tmp_path / "missing")],
        "cannot read attachment 'f.txt' at ": [
            stored,
            Attachment("f.txt", path=tmp_path),
        ],
        "two attachments have the id 'c.txt'": [
            Attachment("c.txt", data=b"1"),
            Attachment("c.txt", data=b"2"),
        ],
        "not str": ["d.txt"],
        # The mark of a skill's own files: tools.skill of a skill added later listed the
        # upload as its file, and the script read the upload's bytes as the skill's.
        "has skill='rollback': only a Skill's own files": [
            stored,
            Attachment("rollback/steps.md", data=b"rm -rf", skill="rollback"),
        ],
        r"pass \[attachment\], not 'e.txt'": Attachment("e.txt", data=b"1"),
        "a list of Attachment objects, not int": 5,
    }
    for expected, files in cases.items():
        with pytest.raises(CodeModeError, match=expected):
            await engine.run_code("return 1", files=files)  # type: ignore[arg-type]
    assert await engine.store.scripts() == []
    assert [p for p in blobs.rglob("*") if p.is_file()] == []
    none = await engine.run_code("return files.list().length", files=None)  # type: ignore[arg-type]
    assert none.value == 0, none.text  # None is no files, as a host passes it


async def test_a_shown_text_file_is_read_only_as_far_as_it_is_shown(
    inproc: InProcessRunner,
) -> None:
    """The engine reads of a shown text file what the model may see (the `shown` budget),
    off the event loop. It read the whole blob, on the loop: showing a 1 GB log file held the
    host's loop while it read 1 GB into memory, decoded and encoded it, to keep 64 KiB."""
    import asyncio

    reads: list[tuple[int, bool]] = []

    class Watched(BlobStore):
        def read(self, digest: str, offset: int, length: int) -> bytes:
            try:
                asyncio.get_running_loop()
                on_loop = True
            except RuntimeError:
                on_loop = False
            reads.append((length, on_loop))
            return super().read(digest, offset, length)

    engine = CodeMode([], runner=inproc, blobs=Watched(), limits=Limits(shown=1000))
    big = ("é" + "x" * 98 + "\n").encode() * 10_000  # 1,010,000 bytes
    result = await engine.run_code(
        "files.show('big.txt'); return 1", files=[Attachment("big.txt", data=big)]
    )
    assert result.status == "finished", result.text
    shown = result.text.split("Shown: big.txt (text/plain, 1,010,000 bytes)\n", 1)[1]
    kept = big[:1000].decode()
    assert shown == f"{kept}\n[... {len(big) - 1000:,} bytes of big.txt cut ...]"
    assert reads and all(length <= 1000 + 4 and not on_loop for length, on_loop in reads)


async def test_a_shown_binary_file_is_named_not_spelled_out(inproc: InProcessRunner) -> None:
    """A file that is neither text nor media, shown: its bytes went in front of the model as
    text, NULs and a terminal's escapes with them. It is named and left out; a text file's
    stray control character is a replacement mark; a MIME type in capitals is the type it
    names (IMAGE/PNG was shown as text), and so is one with parameters, as an upload's
    Content-Type has them (image/png; name=e.png went to no model API: "the Anthropic API
    takes no image/png; name=e.png")."""
    from engine.adapters import result_for

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    engine = CodeMode([], runner=inproc)
    result = await engine.run_code(
        "files.show('b.bin'); files.show('log.txt'); files.show('d.png'); files.show('e');"
        "return files.stat('e').mime",
        files=[
            Attachment("b.bin", data=bytes(range(256))),
            Attachment("log.txt", data=b"ok \x1b[31mred\x1b[0m\n"),
            Attachment("d.png", data=png, mime="IMAGE/PNG"),
            Attachment("e", data=png, mime=" Image/PNG ; name=e.png"),
        ],
    )
    assert result.status == "finished", result.text
    assert "\x00" not in result.text and "\x1b" not in result.text, result.text
    assert (
        "Shown: b.bin (application/octet-stream, 256 bytes) was left out: it is not text "
        "(binary data, and not an image, audio, video or PDF)"
    ) in result.text
    assert "Shown: log.txt (text/plain, 16 bytes)\nok \ufffd[31mred\ufffd[0m" in result.text
    assert "Shown: d.png (image/png, 70 bytes), attached." in result.text
    assert "Shown: e (image/png, 70 bytes), attached." in result.text
    assert result.value == "image/png"
    assert [m["type"] for m in result.media] == ["image", "image"]
    sent = result_for(result, "anthropic", "toolu_1")["content"]
    assert [block["type"] for block in sent] == ["text", "image", "image"], sent


async def test_a_postgres_blob_store_whose_connection_is_cut_goes_on(postgres: str) -> None:
    """The server ends the blob store's connection (a restart, a proxy): the next read or
    write makes it again and goes on, whether it is a step's read, storing an attachment or
    reading the files a finished script showed. (Each raised psycopg's own error out of
    run_code once; then each was StoreUnavailable, the first run_code after a server restart
    failing for nothing.) A store that stays down is StoreUnavailable
    (test_attachments_after_a_server_restart and the store's failure tests)."""
    import uuid

    import psycopg

    from engine import PostgresStore
    from runner import ProcessRunner

    def cut() -> None:
        """End the blob store's connection, as a server restart or a proxy would."""
        conn = engine.blobs._conn  # type: ignore[attr-defined]
        with psycopg.connect(postgres, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))

    @tool(read_only=True)
    def disconnect() -> str:
        """Cut the blob store's connection."""
        cut()
        return "cut"

    store = PostgresStore(postgres, schema=f"blobs_{uuid.uuid4().hex[:12]}")
    async with ProcessRunner() as runner:
        engine = CodeMode([disconnect], runner=runner, store=store, live=False, retry_delay=0.1)
        try:
            files = [Attachment("a.txt", data=b"hello")]
            read = await engine.run_code(
                "await tools.disconnect({}); return await files.text('a.txt')", files=files
            )
            assert read.status == "finished" and read.value == "hello", read.text

            shown = await engine.run_code(
                "files.show('a.txt'); await tools.disconnect({}); return 2", files=files
            )
            assert shown.status == "finished" and shown.value == 2, shown.text
            assert "Shown: a.txt (text/plain, 5 bytes)\nhello" in shown.text

            cut()
            again = await engine.run_code(
                "return await files.text('b.txt')", files=[Attachment("b.txt", data=b"new")]
            )
            assert again.value == "new", again.text
        finally:
            await engine.aclose()


async def _paused_with_a_file(pay: Any, code: str, directory: Path) -> Any:
    """The script run on a SQLite log in ``directory`` with a.txt ("hello"), paused."""
    from engine import SqliteStore

    first = CodeMode([pay], runner=InProcessRunner(), store=SqliteStore(directory))
    try:
        paused = await first.run_code(code, files=[Attachment("a.txt", data=b"hello")])
        assert paused.status == "paused", paused.text
        return paused
    finally:
        await first.aclose()


async def test_files_of_a_sqlite_log_outlast_a_restart(tmp_path: Path) -> None:
    """An engine given a SQLite log and no data_dir keeps the files beside the log, where
    data_dir=<its directory> keeps them: a host restarted on the log reads a paused script's
    files. They were kept in memory, so the resumed script failed with 'a.txt is gone'."""
    from engine import SqliteStore

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay."""
        return "paid"

    code = """
    const text = await files.text("a.txt");
    await tools.pay({ cents: text.length });
    return await files.text("a.txt");
    """
    paused = await _paused_with_a_file(pay, code, tmp_path)
    assert len([p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]) == 1
    restarted = CodeMode([pay], runner=InProcessRunner(), store=SqliteStore(tmp_path))
    try:
        await restarted.approve(paused.script_id, paused.waiting[0]["call_id"])
        done = await restarted.resume(paused.script_id)
        assert done.status == "finished" and done.value == "hello", done.text
    finally:
        await restarted.aclose()


@pytest.mark.parametrize("damage", ["removed", "cut short", "written over"])
async def test_a_resume_whose_files_the_store_lost_runs_no_call(
    tmp_path: Path, damage: str
) -> None:
    """The blobs of a paused script's files are gone (or cut short, or written over with
    as many other bytes) when it is resumed: the resume raises FilesMissing naming them,
    before the approved call runs (it ran, and the replay, reading an error or other bytes
    where its first run read the recorded ones, failed as a divergence blamed on the script,
    or failed the script when the blob was cut short); with the blobs back, the resume goes
    on and the call runs once."""
    from engine import FilesMissing, SqliteStore

    paid: list[int] = []

    @tool(needs_approval=True)
    def pay(cents: int) -> str:
        """Pay."""
        paid.append(cents)
        return "paid"

    code = """
    let text;
    try { text = await files.text("a.txt") } catch (e) { text = "unreadable" }
    await tools.pay({ cents: text.length });
    return text;
    """
    paused = await _paused_with_a_file(pay, code, tmp_path)
    (blob,) = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    kept = blob.read_bytes()
    if damage == "removed":
        blob.unlink()
    elif damage == "cut short":
        blob.write_bytes(kept[:-1])
    else:
        blob.write_bytes(kept.upper())
    restarted = CodeMode([pay], runner=InProcessRunner(), store=SqliteStore(tmp_path))
    try:
        await restarted.approve(paused.script_id, paused.waiting[0]["call_id"])
        with pytest.raises(FilesMissing, match=r"the file store lost or changed: 'a\.txt'"):
            await restarted.resume(paused.script_id)
        assert paid == []
        assert (await restarted.store.get_script(paused.script_id)).status == "paused"
        blob.write_bytes(kept)
        done = await restarted.resume(paused.script_id)
        assert done.status == "finished" and done.value == "hello", done.text
        assert paid == [5]
    finally:
        await restarted.aclose()


@pytest.mark.parametrize("stored", [b"0123", b"", b"0" * 2000], ids=["short", "empty", "longer"])
async def test_a_blob_the_store_changed_in_size_is_gone_to_the_script(
    inproc: InProcessRunner, stored: bytes
) -> None:
    """A blob whose bytes in the store are not as many as recorded (cut short, emptied, or
    replaced) is a file gone, not a shorter file: the script read 4 bytes of a 1,000-byte
    file while `files.stat` said 1,000."""
    blobs = BlobStore()

    @tool
    def damage() -> int:
        """Change every blob's bytes, as a broken store would."""
        for digest in blobs._memory:
            blobs._memory[digest] = stored
        return 0

    engine = CodeMode([damage], runner=inproc, blobs=blobs)
    code = "await tools.damage(); try { return (await files.text('d.txt')).length } catch (e) { return e.message }"
    result = await engine.run_code(code, files=[Attachment("d.txt", data=b"0123456789" * 100)])
    assert result.value == (
        "d.txt is gone: its bytes in the store are not the 1000 recorded (the store lost or "
        "changed them)"
    )


@pytest.mark.parametrize("live", [True, False], ids=["live", "replayed"])
async def test_a_blob_file_written_over_between_steps_is_gone_to_the_script(
    inproc: InProcessRunner, tmp_path: Path, live: bool
) -> None:
    """A blob file written over with as many other bytes while the script's call ran (by
    anyone: here the tool itself) is read as a file gone, naming it: the next step read the
    new bytes, as if the script had been given them (a replay read "HELLO" where the run
    that made the calls read "hello")."""

    @tool
    def overwrite() -> int:
        """Write over every blob file."""
        blobs = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
        for blob in blobs:
            blob.write_bytes(blob.read_bytes().upper())
        return len(blobs)

    code = """
    const read = async () => { try { return await files.text("a.txt") } catch (e) { return e.message } };
    const first = await read();
    await tools.overwrite();
    return [first, await read()];
    """
    engine = CodeMode([overwrite], runner=inproc, data_dir=tmp_path, live=live)
    try:
        result = await engine.run_code(code, files=[Attachment("a.txt", data=b"hello")])
    finally:
        await engine.aclose()
    gone = "a.txt is gone: its bytes in the store were written over since they were recorded"
    # Replayed, the first read is made again too; live, the process has its bytes already.
    assert result.value == ["hello" if live else gone, gone], result.text


async def test_a_skill_file_the_store_lost_is_stored_again(tmp_path: Path) -> None:
    """An engine keeps the records of its skills' files stored before; a blob the store
    lost since is stored again at the next run_code (the files stayed unreadable until the
    engine restarted)."""
    import shutil

    from engine import Skill

    engine = CodeMode(
        [],
        runner=InProcessRunner(),
        data_dir=tmp_path,
        skills=[Skill("s", "A skill.", "Read s/a.txt.", files={"a.txt": b"skill text"})],
    )
    code = "try { return await files.text('s/a.txt') } catch (e) { return e.message }"
    try:
        assert (await engine.run_code(code)).value == "skill text"
        shutil.rmtree(tmp_path / "blobs")
        assert "its bytes are gone from the store" in (await engine.run_code(code)).value
        assert (await engine.run_code(code)).value == "skill text"
    finally:
        await engine.aclose()


@pytest.mark.parametrize("damage", ["cut short", "written over"])
async def test_a_blob_cut_short_is_written_again_by_the_next_script_given_its_bytes(
    inproc: InProcessRunner, tmp_path: Path, damage: str
) -> None:
    """A blob file cut short (a crash before its bytes reached the disk), or written over
    with as many other bytes, was kept as it was, its name being right: every later script
    given those bytes read "a.txt is gone" (or, written over, the other bytes). The next
    script given them writes it again."""
    engine = CodeMode([], runner=inproc, data_dir=tmp_path)
    code = "return await files.text('a.txt')"
    files = [Attachment("a.txt", data=b"hello")]
    try:
        assert (await engine.run_code(code, files=files)).value == "hello"
        (blob,) = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
        blob.write_bytes(b"hel" if damage == "cut short" else b"HELLO")
        result = await engine.run_code(code, files=files)
        assert result.status == "finished" and result.value == "hello", result.text
    finally:
        await engine.aclose()


@pytest.mark.parametrize("kind", ["memory", "directory", "postgres"])
def test_a_blob_store_says_which_blobs_it_lost(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """BlobStore.missing: the digests asked for that the store does not have whole (gone,
    of another size than recorded, or, on disk or in PostgreSQL, written over), in the
    order asked (PostgreSQL's in one query). Needs PostgreSQL for "postgres"."""
    import uuid

    from engine import PostgresStore

    if kind == "postgres":
        dsn = request.getfixturevalue("postgres")
        blobs = PostgresStore(dsn, schema=f"lost_{uuid.uuid4().hex[:12]}").blob_store()
    else:
        blobs = BlobStore(tmp_path if kind == "directory" else None)
    try:
        kept = blobs.put(b"kept")
        gone = "0" * 64
        empty = blobs.put(b"")
        asked = {gone: 4, kept: 4, empty: 0, "f" * 64: 0}
        assert blobs.missing(asked) == [gone, "f" * 64]
        assert blobs.missing({kept: 3, empty: 1}) == [kept, empty]
        assert blobs.missing({}) == []
        if kind != "memory":
            # Written over with as many other bytes: missing, and read as gone.
            assert blobs.read(kept, 0, 4) == b"kept"
            if kind == "directory":
                (tmp_path / kept[:2] / kept).write_bytes(b"KEPT")
            else:
                blobs._one("UPDATE blobs SET data = %s WHERE digest = %s", (b"KEPT", kept))  # type: ignore[attr-defined]
            assert blobs.missing({kept: 4}) == [kept]
            with pytest.raises(FileMissing, match="written over since they were recorded"):
                blobs.read(kept, 0, 4)
            assert blobs.put(b"kept") == kept  # written again, whole
            assert blobs.missing({kept: 4}) == [] and blobs.read(kept, 0, 4) == b"kept"
    finally:
        blobs.close()


async def test_a_limit_met_by_a_byte_says_so_in_bytes(inproc: InProcessRunner) -> None:
    """A size one byte over its limit is said in bytes: rounded, it read "2 KiB of files,
    over the 2 KiB one run may read"."""
    engine = CodeMode([], runner=inproc, limits=Limits(file_bytes=2048, total_file_bytes=2048))
    attached = [Attachment("d.txt", data=b"x" * 2049)]
    result = await engine.run_code("return (await files.text('d.txt')).length", files=attached)
    assert result.limit == "file_bytes", result.text
    assert (
        "reading d.txt (2,049 bytes) from byte 0 would take this run past the 2,048 bytes of "
        "files one run may read"
    ) in result.text
    engine = CodeMode([], runner=inproc, limits=Limits(total_file_bytes=2048))
    result = await engine.run_code("return (await files.text('d.txt')).length", files=attached)
    assert result.limit == "total_file_bytes", result.text
    assert "read 2,049 bytes of files in all, over the 2,048 bytes" in result.text


async def test_a_long_line_is_read_in_time_linear_in_its_length() -> None:
    """files.lines over a file of one 56 MiB line (minified JSON, a CSV whose lines end in a
    CR alone) finishes well within compute_ms in the confined process. The reader joined
    each 256 KiB piece onto the line so far and split it all again, quadratic in the line:
    this took about 11 s of CPU and met compute_ms (5 s); it takes well under one now."""
    from runner import ProcessRunner

    size = 56 << 20
    code = """
    let n = 0, chars = 0;
    for await (const line of files.lines("one.txt")) { n++; chars += line.length; }
    return [n, chars];
    """
    async with ProcessRunner() as runner:
        engine = CodeMode([], runner=runner)
        try:
            result = await engine.run_code(code, files=[Attachment("one.txt", data=b"x" * size)])
        finally:
            await engine.aclose()
    assert result.status == "finished", result.text
    assert result.value == [1, size]


async def test_files_text_reads_a_file_at_its_bound_in_the_confined_process() -> None:
    """files.text of a file of an eighth of memory (32 MiB by default), the most it reads,
    gives its text, in both languages. The process crashed (SandboxCrash, SIGSEGV): orjson,
    encoding the answer for the script, reserved about eight bytes a character, and the heap
    limit (512 MiB) refused it; a Python script then failed on orjson's parse of the answer
    ('JSONDecodeError: Not enough memory to allocate buffer')."""
    from runner import ProcessRunner

    size = Limits().memory // 8
    files = [Attachment("a.txt", data=b"x" * (size - 3) + b'\\"\n')]
    scripts = {
        "javascript": 'const t = await files.text("a.txt"); return [t.length, t.slice(-3)]',
        "python": 't = await files.text("a.txt")\nreturn [len(t), t[-3:]]',
    }
    async with ProcessRunner() as runner:
        engine = CodeMode([], runner=runner)
        try:
            for language, code in scripts.items():
                result = await engine.run_code(code, files=files, language=language)  # type: ignore[arg-type]
                assert result.status == "finished", (language, result.text)
                assert result.value == [size, '\\"\n'], language
        finally:
            await engine.aclose()


async def test_an_attachment_read_from_a_path_takes_its_type_from_its_id(
    inproc: InProcessRunner, tmp_path: Path
) -> None:
    """An attachment's type is guessed from its id (what the script and the model know it
    by), then from its path: an upload kept as /uploads/8f3a but attached as chart.png is
    shown to the model as an image. It was guessed from the path alone, so it was
    application/octet-stream and shown as text (the PNG's bytes decoded as UTF-8)."""
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 50
    upload = tmp_path / "8f3a"
    upload.write_bytes(png)
    named = tmp_path / "notes.md"
    named.write_bytes(b"# hi\n")
    assert Attachment("chart.png", path=upload).mime_type() == "image/png"
    assert Attachment("notes", path=named).mime_type() == "text/markdown"  # the path's, then
    engine = CodeMode([], runner=inproc)
    result = await engine.run_code(
        "files.show('chart.png'); return files.stat('chart.png').mime",
        files=[Attachment("chart.png", path=upload)],
    )
    assert result.value == "image/png", result.text
    assert result.content[1]["type"] == "image"


_READ_JSONL = {
    "javascript": """
    const seen = [];
    for await (const v of files.jsonl("big.jsonl")) seen.push(v.a ? [v.a.length, v.n] : v);
    return seen;
    """,
    "python": """
seen = []
async for v in files.jsonl("big.jsonl"):
    seen.append([len(v["a"]), v["n"]] if "a" in v else v)
return seen
""",
}


@pytest.mark.parametrize("language", ["javascript", "python"])
async def test_a_long_json_line_reaches_the_script_in_the_confined_process(language: str) -> None:
    """files.jsonl over a line holding a 32 MiB string gives its value. The process crashed
    (SIGSEGV): orjson, encoding the value again (to check it as data, then for the script),
    reserved about eight bytes a character and the heap limit refused it. A line over 1 MiB
    now goes to the script as its text; a short one as before. In a Python script, whose
    heap is the process's, orjson's parse of the line took a buffer of twelve times it first
    ("not JSON: Not enough memory to allocate buffer"): a long line is parsed by the
    standard library."""
    from runner import ProcessRunner

    big = 32 << 20
    data = b'{"a": "' + b"x" * big + b'", "n": [1, 2.5, null]}\n{"b": "\\u00e9"}\n'
    async with ProcessRunner() as runner:
        engine = CodeMode([], runner=runner, language=language, type_check="off")
        try:
            result = await engine.run_code(
                _READ_JSONL[language], files=[Attachment("big.jsonl", data=data)]
            )
        finally:
            await engine.aclose()
    assert result.status == "finished", result.text
    assert result.value == [[big, [1, 2.5, None]], {"b": "é"}]


async def test_a_file_named_in_another_unicode_normalization_is_found(
    inproc: InProcessRunner,
) -> None:
    """An id from macOS writes é as e and an accent mark; the script writes it as one
    character and reads the file, in every run. It read 'no file 'é.txt' (did you mean
    'é.txt'?)', two names that look the same."""
    decomposed = "re\u0301sume\u0301.txt"

    @tool
    def ping() -> str:
        """A call, so the script runs again from its log."""
        return "pong"

    engine = CodeMode([ping], runner=inproc)
    code = """
    const before = await files.text("r\u00e9sum\u00e9.txt");
    await tools.ping();
    files.show("r\u00e9sum\u00e9.txt");
    return [before, await files.text("r\u00e9sum\u00e9.txt"), files.stat("r\u00e9sum\u00e9.txt").id];
    """
    result = await engine.run_code(code, files=[Attachment(decomposed, data=b"cv")])
    assert result.status == "finished", result.text
    assert result.value == ["cv", "cv", decomposed]
    assert f"Shown: {decomposed} (text/plain, 2 bytes)\ncv" in result.text


async def test_two_attachments_whose_ids_are_one_in_another_normalization_are_refused(
    tmp_path: Path,
) -> None:
    """A script finds a file by its id in either Unicode normalization, so "résumé.txt" as
    one character and as e and an accent were one name for two files: both were recorded,
    listed and shown alike, and the script read whichever one it happened to spell. As two
    skills of such names are, they are refused, naming the id, before anything is recorded;
    so is an upload whose id is a skill file's in the other normalization. Nothing is
    stored either (the files before the second of an id were read and stored, for
    nothing)."""
    from engine import CodeModeError, Skill

    nfc, nfd = "r\u00e9sum\u00e9.txt", "re\u0301sume\u0301.txt"
    skill = Skill("cv", "CVs.", "Read them.", files={nfc: b"theirs"})
    blobs = tmp_path / "blobs"
    engine = CodeMode([], runner=InProcessRunner(), skills=[skill], blobs=BlobStore(blobs))
    try:
        twins = [Attachment(nfc, data=b"one"), Attachment(nfd, data=b"two")]
        with pytest.raises(
            CodeModeError,
            match=r"two attachments have the id .* \(one in another Unicode normalization\)",
        ):
            await engine.run_code("return 1", files=twins)
        with pytest.raises(
            CodeModeError,
            match=r"has the id of a file of skill 'cv' \(one in another Unicode normalization\)",
        ):
            await engine.run_code("return 1", files=[Attachment("cv/" + nfd, data=b"mine")])
        assert await engine.store.scripts() == []
        assert [p for p in blobs.rglob("*") if p.is_file()] == []
    finally:
        await engine.aclose()


def _in_a_process(program: str) -> subprocess.CompletedProcess[str]:
    """``program`` run by this Python in a process of its own, from the checkout (so it may
    patch the os module for itself alone)."""
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=root, timeout=60
    )


def test_a_blob_whose_write_fails_leaves_no_part_behind(tmp_path: Path) -> None:
    """A blob write that fails (here past RLIMIT_FSIZE, as on a full disk) raises OSError and
    leaves no file: its part was left as a .tmp file, one more at each failure."""
    program = f"""
import resource, signal
from engine._files import BlobStore
blobs = BlobStore({str(tmp_path / "blobs")!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
try:
    blobs.put(b"x" * 5000)
except OSError as e:
    print(e.strerror)
"""
    done = _in_a_process(program)
    assert (done.returncode, done.stdout, done.stderr) == (0, "File too large\n", "")
    assert [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()] == []


def test_a_blob_is_on_the_disk_before_its_name_is(tmp_path: Path) -> None:
    """A blob's bytes reach the disk before it is renamed into place, and its name before
    put returns (the log then records it, durably at the script's first call): they were
    written and renamed without an fsync, so a power loss could leave the blob empty or
    gone under a script whose calls had run, which could then never read its files. The
    store's folder is synced before its first blob is written, with the folders blobs go
    in made: a folder another host had made, whose name that host had not yet synced, held
    a blob put returned for, which a power loss could take with the folder. Bytes stored
    already (by this store or another) make no write and no sync; a new blob after the
    first syncs its own folder only. The store's folder's name is synced in its parent too
    (the store may have just made it). A fresh store makes only the folders missing (it made
    all 256 again, each failing, and stat'ed each, at its first new blob). The calls are
    watched in a process of their own (each call still made)."""
    x = b"x" * 5000
    dx = hashlib.sha256(x).hexdigest()
    # Another blob for x's folder, and one for another folder.
    y = next(
        b"y%d" % i for i in range(10_000) if hashlib.sha256(b"y%d" % i).hexdigest()[:2] == dx[:2]
    )
    z = next(
        b"z%d" % i for i in range(10_000) if hashlib.sha256(b"z%d" % i).hexdigest()[:2] != dx[:2]
    )
    dz = hashlib.sha256(z).hexdigest()
    w = next(
        b"w%d" % i for i in range(10_000) if hashlib.sha256(b"w%d" % i).hexdigest()[:2] != dx[:2]
    )
    root = tmp_path / "blobs"
    (root / dx[:2]).mkdir(parents=True)  # as another host's put made it, not synced yet
    program = f"""
import builtins, json, os, re
from engine._files import BlobStore
root = os.path.realpath({str(root)!r})
def named(path):
    # As the store's folder names it, a temporary file by its blob's name.
    return re.sub(r"[.][0-9]+[.][0-9]+[.]tmp$", ".tmp", os.path.relpath(os.path.realpath(path), root))
done = []
fsync, replace, opened, mkdir = os.fsync, os.replace, builtins.open, os.mkdir
def synced(fd):
    done.append(("fsync", named(os.readlink(f"/proc/self/fd/{{fd}}"))))
    fsync(fd)
def replaced(src, dst):
    done.append(("replace", named(src), named(dst)))
    replace(src, dst)
def opening(file, mode="r", *args, **kwargs):
    if set(mode) & set("wax+"):
        done.append(("open", named(file)))
    return opened(file, mode, *args, **kwargs)
def made(path, *args, **kwargs):
    done.append(("mkdir", named(path)))
    return mkdir(path, *args, **kwargs)
stat = os.stat
def stated(path, *args, **kwargs):
    if not named(path).startswith(".."):
        done.append(("stat", named(path)))
    return stat(path, *args, **kwargs)
os.fsync, os.replace, builtins.open, os.mkdir, os.stat = synced, replaced, opening, made, stated
blobs = BlobStore(root)
steps = {{}}
for phase, store, data in (
    ("first", blobs, {x!r}),
    ("again", blobs, {x!r}),
    ("fresh", BlobStore(root), {x!r}),
    ("beside", blobs, {y!r}),
    ("elsewhere", blobs, {z!r}),
    ("fresh new", BlobStore(root), {w!r}),
):
    done.clear()
    store.put(data)
    steps[phase] = list(done)
print(json.dumps(steps))
"""
    done = _in_a_process(program)
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)

    def written(digest: str) -> list[list[str]]:
        tmp = f"{digest[:2]}/{digest}.tmp"
        # Its bytes, then its name, then its folder (the name in it).
        return [
            ["open", tmp],
            ["fsync", tmp],
            ["replace", tmp, f"{digest[:2]}/{digest}"],
            ["fsync", digest[:2]],
        ]

    folders = ["fsync", "."], ["fsync", ".."]
    made = [["mkdir", f"{i:02x}"] for i in range(256) if f"{i:02x}" != dx[:2]]
    assert steps == {
        "first": [*made, *folders, *written(dx)],
        "again": [],
        "fresh": [],
        # Its folder still there? (one removed since is made again)
        "beside": [["stat", dx[:2]], *written(hashlib.sha256(y).hexdigest())],
        "elsewhere": [["stat", dz[:2]], *written(dz)],
        "fresh new": [*folders, *written(hashlib.sha256(w).hexdigest())],
    }, steps
    assert sorted(p.name for p in root.iterdir()) == [f"{i:02x}" for i in range(256)]


@pytest.mark.parametrize(
    ("refusal", "said"), [("EINVAL", "stored"), ("EOPNOTSUPP", "stored"), ("EIO", "Input/output")]
)
def test_a_blob_is_stored_where_folders_are_not_synced(
    tmp_path: Path, refusal: str, said: str
) -> None:
    """Where the file system does not sync directories (fsync fails with EINVAL or
    EOPNOTSUPP on some FUSE and CIFS mounts), a new blob is stored as before the syncs were
    made: its put raised after the rename, so no script given a new file could start there.
    A failure of another kind (EIO) is the store failing, and raised. Each fsync is still
    made, and fails after (in a process of its own)."""
    program = f"""
import errno, os, stat
from engine._files import BlobStore
fsync = os.fsync
def synced(fd):
    fsync(fd)
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        raise OSError(errno.{refusal}, os.strerror(errno.{refusal}))
os.fsync = synced
blobs = BlobStore({str(tmp_path / "blobs")!r})
try:
    digest = blobs.put(b"x" * 5000)
except OSError as e:
    print(e.strerror)
else:
    print("stored" if blobs.read(digest, 0, 10) == b"x" * 10 else "not read")
"""
    done = _in_a_process(program)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith(said), done.stdout
    # Stored whole; or (EIO: the store's folder failed its sync first) nothing, no part.
    stored = [p.suffix for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert stored == ([""] if said == "stored" else []), stored


async def test_a_file_where_a_blob_folder_goes_is_named(tmp_path: Path) -> None:
    """A file in the store's folder with a blob folder's name (ff) fails a new blob's put,
    and run_code, with a lasting StoreUnavailable naming it and saying to remove it (every
    new blob failed, with mkdir's bare "File exists", as a store that was down, to be tried
    again); a blob already stored is still read."""
    from engine import StoreUnavailable

    blobs = BlobStore(tmp_path / "blobs")
    held = blobs.put(b"held")
    (tmp_path / "blobs" / "ff").rmdir()
    (tmp_path / "blobs" / "ff").write_bytes(b"stray")
    fresh = BlobStore(tmp_path / "blobs")
    in_the_way = "ff is in the blob store's folder but is not a folder .*; remove it, then run"
    with pytest.raises(StoreUnavailable, match=in_the_way) as raised:
        fresh.put(b"new")
    assert raised.value.permanent  # not a store that is down, to be tried again
    assert fresh.read(held, 0, 4) == b"held"
    engine = CodeMode([], runner=InProcessRunner(), blobs=BlobStore(tmp_path / "blobs"))
    with pytest.raises(StoreUnavailable, match=in_the_way) as raised:
        await engine.run_code("return 1", files=[Attachment("a.txt", data=b"new")])
    assert raised.value.permanent
    assert await engine.store.scripts() == []
    await engine.aclose()


async def test_a_utf16_file_is_read_as_its_text_in_the_confined_process() -> None:
    """A file in UTF-16 with its byte-order mark (Excel's "Unicode Text", Windows
    PowerShell's redirections) is read and shown as its text, in either byte order: it was
    read as UTF-8, garbage with a NUL between letters, in silence, and shown as binary. (The
    codecs are loaded before lockdown: after it, there is no loading them.)"""
    from runner import ProcessRunner

    text = "name\tcity\nJosé\tMünchen\n"
    files = [
        Attachment("export.txt", data=b"\xff\xfe" + text.encode("utf-16-le")),
        Attachment("export.tsv", data=b"\xfe\xff" + text.encode("utf-16-be")),
    ]
    code = """
    const lines = [], rows = [], chunks = [], later = [];
    for await (const l of files.lines("export.txt")) lines.push(l);
    for await (const r of files.csv("export.tsv", { delimiter: "\\t" })) rows.push(r);
    for await (const c of files.chunks("export.tsv", { size: 1 })) chunks.push(c);
    for await (const c of files.chunks("export.txt", { offset: 12 })) later.push(c);
    files.show("export.txt");
    return [await files.text("export.tsv"), lines, rows, chunks.join(""), later.join("")];
    """
    async with ProcessRunner() as runner:
        engine = CodeMode([], runner=runner)
        try:
            result = await engine.run_code(code, files=files)
        finally:
            await engine.aclose()
    assert result.status == "finished", result.text
    assert result.value == [
        text,
        ["name\tcity", "José\tMünchen"],
        [{"name": "José", "city": "München"}],
        text,
        text[5:],
    ]
    assert f"Shown: export.txt (text/plain, {2 + 2 * len(text)} bytes)\n{text}" in result.text


async def test_a_large_file_is_stored_a_chunk_at_a_time(
    inproc: InProcessRunner, tmp_path: Path
) -> None:
    """An attachment given by its path goes into a blob store of files a chunk at a time:
    storing 24 MiB took the whole file in memory (it was read whole, then hashed and
    written), so a host attaching a dataset of a few GB needed as much memory again. Its
    bytes are stored as they are; a second script given the file writes nothing (the blob's
    file is the one the first made), and a blob cut short since is written again whole."""
    import tracemalloc

    size = 24 << 20
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(size))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    engine = CodeMode([], runner=inproc, data_dir=tmp_path / "data")
    code = 'return [files.stat("big.bin").size, await files.text("small.txt")]'
    files = [Attachment("big.bin", path=big), Attachment("small.txt", path=_small(tmp_path))]
    blob = tmp_path / "data" / "blobs" / digest[:2] / digest
    try:
        tracemalloc.start()
        try:
            first = await engine.run_code(code, files=files)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert first.status == "finished" and first.value == [size, "small"], first.text
        assert peak < size / 4, f"storing a {size:,}-byte file took {peak:,} bytes at its peak"
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest
        made = blob.stat()
        again = await engine.run_code(code, files=files)
        assert again.value == [size, "small"], again.text
        assert (blob.stat().st_ino, blob.stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)

        with open(blob, "r+b") as f:
            f.truncate(size // 2)
        cut = await engine.run_code(code, files=files)
        assert cut.value == [size, "small"], cut.text
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest
        assert [p.name for p in blob.parent.iterdir()] == [digest]  # no part left behind
    finally:
        await engine.aclose()


def _small(tmp_path: Path) -> Path:
    small = tmp_path / "small.txt"
    small.write_bytes(b"small")
    return small


class _Changing:
    """A file that reads as other bytes after each seek back to its start, ``changes``
    times, then stays."""

    def __init__(self, changes: int) -> None:
        self.changes = changes
        self.version = 0
        self.at = 0

    def _bytes(self) -> bytes:
        return b"version %d " % min(self.version, self.changes) * 1000

    def read(self, size: int = -1, /) -> bytes:
        data = self._bytes()[self.at :] if size < 0 else self._bytes()[self.at : self.at + size]
        self.at += len(data)
        return data

    def seek(self, offset: int, whence: int = 0, /) -> int:
        if whence == os.SEEK_END:
            self.at = len(self._bytes()) + offset
        else:
            if offset == 0 and self.at:
                self.version += 1
            self.at = offset
        return self.at

    def tell(self) -> int:
        return self.at


@pytest.mark.parametrize("changes", [1, 2, 10])
def test_a_file_that_changes_as_it_is_stored(tmp_path: Path, changes: int) -> None:
    """A file other bytes each time it is read (between the hash and the copy, a program
    writing it) is read again: once it reads as the same bytes twice, they are stored under
    their own name; a file that never does is refused (BlobChanged), leaving nothing in the
    store. Hashed and copied without a check, its blob held bytes other than its name's."""
    from engine._files import BlobChanged

    blobs = BlobStore(tmp_path / "blobs")
    source = _Changing(changes)
    if changes >= 10:
        with pytest.raises(BlobChanged):
            blobs.put_file(source)
        assert [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()] == []
        return
    digest, size = blobs.put_file(source)
    stored = b"version %d " % changes * 1000
    assert (digest, size) == (hashlib.sha256(stored).hexdigest(), len(stored))
    assert blobs.read(digest, 0, size) == stored
    assert [p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file()] == [digest]


async def test_an_attachment_that_changes_as_it_is_stored_is_named(
    inproc: InProcessRunner, tmp_path: Path
) -> None:
    """run_code given a file that never reads as the same bytes twice: an error naming it,
    its path and what to do, and no script started."""
    from engine import CodeModeError
    from engine._files import Readable

    class Changing(BlobStore):
        def put_file(self, f: Readable) -> tuple[str, int]:
            return super().put_file(_Changing(10))

    engine = CodeMode([], runner=inproc, data_dir=tmp_path, blobs=Changing(tmp_path / "b"))
    try:
        with pytest.raises(CodeModeError) as refused:
            await engine.run_code("return 1", files=[Attachment("a.txt", path=_small(tmp_path))])
        said = str(refused.value)
        assert said.startswith(f"attachment 'a.txt' at {tmp_path / 'small.txt'} changed each"), said
        assert "another program writes it" in said and "a copy of it" in said, said
        assert await engine.store.scripts() == []
    finally:
        await engine.aclose()


async def test_a_store_that_keeps_bytes_its_own_way_is_given_a_files_bytes(
    inproc: InProcessRunner, tmp_path: Path
) -> None:
    """A host's blob store that overrides put alone (bytes kept its own way) is given the
    bytes of a file attached by its path too, and the script reads them."""
    kept: dict[str, bytes] = {}

    class Own(BlobStore):
        def put(self, data: bytes) -> str:
            digest = hashlib.sha256(data).hexdigest()
            kept[digest] = data
            return digest

        def read(self, digest: str, offset: int, length: int) -> bytes:
            return kept[digest][offset : offset + length]

    engine = CodeMode([], runner=inproc, blobs=Own())
    try:
        files = [Attachment("a.txt", path=_small(tmp_path))]
        result = await engine.run_code('return await files.text("a.txt")', files=files)
        assert result.value == "small", result.text
        assert list(kept.values()) == [b"small"]
    finally:
        await engine.aclose()


@pytest.mark.parametrize("given", ["path", "data"])
async def test_a_file_past_what_postgres_keeps_in_a_value_is_refused(
    postgres: str, inproc: InProcessRunner, tmp_path: Path, monkeypatch: Any, given: str
) -> None:
    """A file larger than a PostgreSQL blob store keeps (a value of at most 1 GiB; here the
    bound is lowered to 1,000 bytes) is refused before it is read, with its size, the bound
    and what to do, and no script starts: it was read whole into memory, then sent, and the
    server refused it with its own words. One at the bound is stored."""
    import uuid

    from engine import ConfigError, PostgresStore
    from engine.log import _postgres

    monkeypatch.setattr(_postgres, "MAX_BLOB_BYTES", 1000)
    store = PostgresStore(postgres, schema=f"big_{uuid.uuid4().hex[:12]}")
    engine = CodeMode([], runner=inproc, store=store)
    path = tmp_path / "a.bin"

    def attached(size: int) -> Attachment:
        path.write_bytes(b"x" * size)
        if given == "path":
            return Attachment("a.bin", path=path)
        return Attachment("a.bin", data=path.read_bytes())

    try:
        with pytest.raises(ConfigError) as refused:
            await engine.run_code("return 1", files=[attached(1001)])
        assert str(refused.value) == (
            "attachment 'a.bin' is 1,001 bytes; the PostgreSQL blob store keeps at most 1,000 "
            "a file (PostgreSQL's bound on one value, 1 GiB, less room for the statement): "
            "give a smaller file, or a blob store that keeps it (CodeMode's blobs=, one every "
            "host of the log shares)"
        )
        assert await engine.store.scripts() == []
        stored = await engine.run_code(
            'return (await files.text("a.bin")).length', files=[attached(1000)]
        )
        assert stored.status == "finished" and stored.value == 1000, stored.text
    finally:
        await engine.aclose()


def test_a_postgres_blob_is_hashed_by_the_server(postgres: str) -> None:
    """A PostgreSQL blob store's first read of a blob checks its bytes by the server's hash
    of them: it read the whole blob (up to 1 GB) into this process to hash it, to read ten
    bytes of it. A blob written over is still found to be (its hash is not its name)."""
    import tracemalloc
    import uuid

    from engine import PostgresStore

    schema = f"hashed_{uuid.uuid4().hex[:12]}"
    size = 16 << 20
    data = os.urandom(size)
    writer = PostgresStore(postgres, schema=schema).blob_store()
    reader = PostgresStore(postgres, schema=schema).blob_store()  # no blob known to it yet
    try:
        digest = writer.put(data)
        del data
        tracemalloc.start()
        try:
            assert reader.read(digest, 100, 10) == writer.read(digest, 100, 10)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < size / 4, f"reading 10 bytes of a {size:,}-byte blob took {peak:,} bytes"
        writer._one(  # type: ignore[attr-defined]
            "UPDATE blobs SET data = %s WHERE digest = %s", (b"x" * size, digest)
        )
        with pytest.raises(FileMissing, match="written over since they were recorded"):
            reader.read(digest, 0, 10)
    finally:
        writer.close()
        reader.close()
