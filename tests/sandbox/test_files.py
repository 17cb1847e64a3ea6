"""`files` inside a script: listing, reading, the streams of the spec's table, showing, and
the file limits (file_bytes, streams, shown_files, shown, shown_media)."""

from __future__ import annotations

import io
import re
import zipfile
from datetime import date, datetime
from typing import Any, Literal

import openpyxl
import pytest

from sandbox import files as files_module
from sandbox.files import FileError, _Columns
from sandbox.protocol import REMEDIES, Clock, FileInfo, Limits, MiB, Ran, Script
from sandbox.runtime import run_in_process

SALES = b"region,amount\nnorth,10\nsouth,5\nnorth,7\n"


def _xlsx() -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Orders"
    sheet.append(["id", "when", "paid", "total", "note"])
    sheet.append([1, datetime(2026, 1, 2, 0, 0), True, 12.5, "first"])
    sheet.append([None, None, None, None, None])
    sheet.append([2, date(2026, 1, 3), False, 7, None])
    other = book.create_sheet("Stock")
    other.append(["sku", "count"])
    other.append(["a-1", 3])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


BLOBS: dict[str, bytes] = {
    "sales.csv": SALES,
    "semi.csv": b"a;b\n1;2\n",
    "dup.csv": b"a,a,,a.1,b\n1,2,3,4,5\n6,7\n8,9,10,11,12,13\n",
    "events.jsonl": b'{"n":1}\n\n{"n":2}\n{"n":3}\n',
    "bad.jsonl": b'{"n":1}\n{oops\n',
    "notes.md": "# Notes\r\nline two\nthird \u00e9\n".encode(),
    "book.xlsx": _xlsx(),
    "chart.png": b"\x89PNG" + b"\0" * 2000,
    "big.txt": b"x" * 300_000,
}
MIME = {
    "csv": "text/csv",
    "jsonl": "application/jsonl",
    "md": "text/markdown",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "png": "image/png",
    "txt": "text/plain",
}


def run(code: str, gone: set[str] = frozenset(), **limits: Any) -> Ran:  # type: ignore[assignment]
    infos = [FileInfo(id=k, mime=MIME[k.rsplit(".", 1)[1]], size=len(v)) for k, v in BLOBS.items()]

    def fetch(file_id: str, offset: int, length: int) -> bytes:
        if file_id in gone:
            raise FileError(f"{file_id} is gone: deleted")
        return BLOBS[file_id][offset : offset + length]

    script = Script(
        id="files", code=code, files=infos, clock=Clock(now_ms=0, seed=1), limits=Limits(**limits)
    )
    return run_in_process(script, fetch)


def value(code: str, **limits: Any) -> Any:
    ran = run(code, **limits)
    assert ran.outcome == "finished", ran.error
    return ran.value


def test_list_and_stat() -> None:
    """files.list() and files.stat(id) give { id, mime, size } of the attachments."""
    listed = value("return files.list()")
    assert [f["id"] for f in listed] == list(BLOBS)
    assert value("return files.stat('sales.csv')") == {
        "id": "sales.csv",
        "mime": "text/csv",
        "size": len(SALES),
    }


def test_unknown_file_throws_catchably() -> None:
    """A file id that is not attached throws an Error naming it, which the script can catch."""
    message = value("try { files.stat('sale.csv') } catch (e) { return e.message }")
    assert "no file 'sale.csv'" in message and "sales.csv" in message


def test_text_reads_the_whole_file() -> None:
    """await files.text(id) is the whole file as text."""
    assert value("return await files.text('notes.md')") == BLOBS["notes.md"].decode()


def test_text_refuses_more_than_an_eighth_of_memory() -> None:
    """files.text reads up to an eighth of memory; past it, it says to stream instead."""
    message = value(
        "try { await files.text('big.txt') } catch (e) { return e.message }", memory=2 * 1024 * 1024
    )
    assert "files.lines" in message


def test_the_spec_csv_example() -> None:
    """The spec's example: totals per region from a CSV stream."""
    code = """
    const totals = {};
    for await (const row of files.csv("sales.csv")) {
        totals[row.region] = (totals[row.region] ?? 0) + Number(row.amount);
    }
    return totals;
    """
    assert value(code) == {"north": 17, "south": 5}


def test_csv_records_keep_every_cell() -> None:
    """A header's repeated and empty names, and cells past it, still each have a key of
    their own (pandas' a, a.1 for a repeated name; column numbers for the rest): no cell of
    a record is dropped."""
    code = "const out = []; for await (const r of files.csv('dup.csv')) out.push(r); return out"
    assert value(code) == [
        {"a": "1", "a.1": "2", "column3": "3", "a.1.1": "4", "b": "5"},
        {"a": "6", "a.1": "7", "column3": "", "a.1.1": "", "b": ""},
        {"a": "8", "a.1": "9", "column3": "10", "a.1.1": "11", "b": "12", "column6": "13"},
    ]


def test_a_header_of_equal_names_gets_each_its_own() -> None:
    """A thousand equal names: a, a.1 ... a.999, each tried once (not from a.1 up for every
    one: a header is the file's, a script's input)."""
    names = _Columns(["a"] * 1000 + ["a.5", ""]).names
    assert names[:3] == ["a", "a.1", "a.2"] and names[999] == "a.999"
    assert names[1000:] == ["a.5.1", "column1002"]
    assert len(set(names)) == len(names)


def test_csv_options() -> None:
    """header: false gives arrays; delimiter; limit and offset count records, not the header."""
    code = """
    const out = {arrays: [], semi: [], window: []};
    for await (const r of files.csv("sales.csv", { header: false, limit: 2 })) out.arrays.push(r);
    for await (const r of files.csv("semi.csv", { delimiter: ";" })) out.semi.push(r);
    for await (const r of files.csv("sales.csv", { offset: 1, limit: 1 })) out.window.push(r);
    return out;
    """
    assert value(code) == {
        "arrays": [["region", "amount"], ["north", "10"]],
        "semi": [{"a": "1", "b": "2"}],
        "window": [{"region": "south", "amount": "5"}],
    }


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            'files.csv("semi.csv", { delimeter: ";" })',
            "files.csv has no option 'delimeter' (did you mean 'delimiter'?); its options are "
            "limit, offset, header, delimiter",
        ),
        ('files.lines("notes.md", { limt: 1 })', "files.lines has no option 'limt' (did you mean"),
        ('files.chunks("big.txt", { header: false })', "files.chunks has no option 'header'"),
        ('files.xlsx("book.xlsx", { sheets: "Stock" })', "(did you mean 'sheet'?)"),
        # Values that were taken in silence: a size of 0 read 1-byte chunks, 2.5 was 2, and a
        # quote or a line end as the delimiter gave rows of garbage.
        ('files.chunks("big.txt", { size: 0 })', "size is a whole number of bytes, 1 or more"),
        ('files.chunks("big.txt", { size: 1.5 })', "size is a whole number of bytes"),
        ('files.lines("notes.md", { offset: 2.5 })', "offset is a whole count of records"),
        ('files.csv("semi.csv", { delimiter: "\\n" })', "other than a quote or a line end"),
        ('files.csv("semi.csv", { delimiter: \'"\' })', "other than a quote or a line end"),
        ("files.lines(undefined)", 'as in files.lines("data.csv"); undefined was given'),
        ("files.csv(null)", 'as in files.csv("data.csv"); null was given'),
    ],
)
def test_a_stream_option_it_does_not_have_is_refused(call: str, message: str) -> None:
    """A misspelled option is an error naming it and the options there are: it was passed
    over, and the stream read as if it were not there (a csv split on commas, no limit)."""
    ran = run(f"for await (const r of {call}) {{}}")
    assert ran.outcome == "failed" and ran.error is not None
    assert message in ran.error.message


@pytest.mark.parametrize(
    ("language", "call", "message"),
    [
        (
            "javascript",
            "await files.text(files.list()[0])",
            'as in files.text("data.csv"), not an entry of files.list(): give its id, as '
            "files.text(files.list()[0].id)",
        ),
        ("javascript", "files.stat({ id: 3, ok: true, no: null })", '{"id":3,"ok":true,"no":null}'),
        ("javascript", "files.show(false)", 'as in files.show("data.csv"), not false'),
        # Both were "none was given", which is no value of JavaScript's.
        ("javascript", "files.stat(null)", 'as in files.stat("data.csv"); null was given'),
        ("javascript", "files.text(undefined)", 'files.text("data.csv"); undefined was given'),
        (
            "python",
            "await files.text(files.list()[0])",
            'files.text(files.list()[0]["id"])',
        ),
        ("python", "files.stat({'id': 3, 'ok': True})", "not {'id': 3, 'ok': True}"),
        ("python", "files.stat(None)", "; None was given"),
    ],
)
def test_what_is_no_file_id_is_written_in_the_scripts_language(
    language: Literal["javascript", "python"], call: str, message: str
) -> None:
    """A file id that is not a string is named as the script's language writes it, and an
    entry of files.list() given whole is told to give its id: a JavaScript script was shown
    {'id': 'sales.csv', 'mime': 'text/csv', 'size': 38}, a Python dict."""
    infos = [FileInfo(id="sales.csv", mime="text/csv", size=len(SALES))]
    code = f"return {call}"
    script = Script(
        id="f", language=language, code=code, files=infos, clock=Clock(now_ms=0, seed=1)
    )
    ran = run_in_process(script, lambda _f, offset, length: SALES[offset : offset + length])
    assert ran.outcome == "failed" and ran.error is not None
    assert message in ran.error.message
    assert "'mime'" not in ran.error.message


def test_a_file_limit_met_and_not_caught_ends_the_run_on_it() -> None:
    """`shown`, `shown_files`, `shown_media` and `streams` are met at a use of files, where
    the script can catch them; uncaught, the run ends on the limit (the ending named none,
    so the host's log had no warning of it and the result no limit)."""
    ran = run('files.show("big.txt"); files.show("notes.md"); return 1', shown=1000)
    assert ran.outcome == "failed" and ran.limit is not None and ran.limit.name == "shown"
    caught = 'try { files.show("big.txt"); files.show("notes.md") } catch (e) { return "caught" }'
    assert value(caught, shown=1000) == "caught"
    ran = run('files.show("sales.csv"); files.show("notes.md"); return 1', shown_files=1)
    assert ran.limit is not None and ran.limit.name == "shown_files"


def test_lines_without_line_ends() -> None:
    """files.lines gives lines without their line ends (\\n or \\r\\n)."""
    code = "const out = []; for await (const l of files.lines('notes.md')) out.push(l); return out"
    assert value(code) == ["# Notes", "line two", "third \u00e9"]


def test_jsonl_skips_blank_lines_and_names_a_bad_line() -> None:
    """files.jsonl gives one value per line; blank lines are not counted; bad JSON names the line."""
    code = "const out = []; for await (const v of files.jsonl('events.jsonl', {offset: 1})) out.push(v.n); return out"
    assert value(code) == [2, 3]
    bad = (
        "try { for await (const v of files.jsonl('bad.jsonl')) {} } catch (e) { return e.message }"
    )
    assert "line 2" in value(bad)


@pytest.mark.parametrize("long", [False, True])
def test_a_bad_jsonl_line_is_placed_once_and_says_how_to_skip_it(long: bool) -> None:
    """The parser's place in the line was said as its own "line 1 column 2 (char 1)" after
    "line 2 is not JSON", two lines at once; it is the line's column. A stream ends at a bad
    line, so the message says how to read past one. Both parsers (a line past LONG_TEXT is
    parsed by the standard library's)."""
    pad = " " * (files_module.LONG_TEXT + 1) if long else ""
    with pytest.raises(FileError) as caught:
        list(files_module._jsonl("e.jsonl", iter(['{"n": 1}', "{oops" + pad])))
    message = str(caught.value)
    assert message.startswith("e.jsonl line 2 is not JSON: ")
    assert (
        " at column 2; a stream ends at its first bad line: to skip such lines, read the "
        in message
    )
    assert message.endswith("file with files.lines and parse each line")
    assert "line 1" not in message and "(char" not in message


def test_an_xlsx_part_past_the_unpacked_bound_is_refused_saying_what_to_do() -> None:
    """A zip bomb (a sheet of 65 MiB of blanks, 64 KiB packed) is refused before it is
    unpacked, naming the part and the bound; the message said nothing of what to do (a
    real sheet that big meets it too): it says to ask for the sheet as CSV."""
    part = b"<worksheet><sheetData>" + b" " * (files_module.MAX_XLSX_XML + 1) + b"</sheetData>"
    buffer = io.BytesIO()
    book = zipfile.ZipFile(io.BytesIO(BLOBS["book.xlsx"]))
    with book, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bomb:
        for item in book.infolist():
            data = part if item.filename == "xl/worksheets/sheet1.xml" else book.read(item)
            bomb.writestr(item, data)
    infos = [FileInfo(id="bomb.xlsx", mime=MIME["xlsx"], size=len(buffer.getvalue()))]
    files = files_module.Files(
        infos, Limits(), lambda _i, offset, length: buffer.getvalue()[offset : offset + length]
    )
    handle = files.open("xlsx", "bomb.xlsx", {})
    with pytest.raises(FileError) as caught:
        files.next(handle)
    assert str(caught.value) == (
        "bomb.xlsx: the workbook part xl/worksheets/sheet1.xml is over 64 MiB unpacked, more "
        "than is read of one part; ask for the sheet as CSV, which files.csv reads row by row"
    )


@pytest.mark.parametrize(
    ("text", "before", "line"),
    [
        ('a,b\n1,"2\n3,4\n5,6\n', [], 2),
        ('a,b\r\n1,2\r\n\r\n3,"4\r\n', [["1", "2"], []], 4),
        ('a,b\r1,"x\r\ry"\r5,"6', [["1", "x\r\ry"]], 5),
        ('a,b\nx"y,"2\n', [], 2),
        # A field closed oddly before the open one: the strict re-read stopped at that, and
        # let the open quote through.
        ('a,b\n"x"y,"d\ne,f\n', [], 2),
    ],
)
def test_a_quote_the_end_of_a_csv_file_leaves_open_is_refused(
    text: str, before: list[list[str]], line: int
) -> None:
    """Python's reader gives a field whose quote is never closed as the rest of the file:
    the rows after a stray quote were one cell, in silence. The rows before it come, then an
    error at the line its row begins, saying what to do."""
    rows = files_module._csv("f.csv", iter(text.splitlines(True)), False, ",")
    read = []
    with pytest.raises(FileError) as caught:
        for row in rows:
            read.append(row)
    assert read == [["a", "b"], *before]
    message = str(caught.value)
    assert message.startswith(f"f.csv line {line} cannot be read as CSV: a quoted field")
    assert message.endswith("(a stray quote, or a file cut short); read its lines with files.lines")


@pytest.mark.parametrize(
    "text",
    ['a,b\n1,"2\n3"\n', "a,b\n1,2", 'a,b\n1,"x ""y"""\n', 'a,b\n"a"b,"c"\n', "a,b\n\n\n"],
)
def test_csv_files_whose_quotes_close_read_as_before(text: str) -> None:
    """A last row that ends the file with its quotes closed, or no line end, or one that
    is odd but closed, reads as Python's reader reads it."""
    import csv

    rows = list(files_module._csv("f.csv", iter(text.splitlines(True)), False, ","))
    assert rows == list(csv.reader(text.splitlines(True)))


def test_the_rows_before_a_bad_line_reach_the_script_first() -> None:
    """A stream's rows come one batch at a time: a bad line failed its whole batch, so the
    rows before it never reached the script, and one that caught the error had not seen
    rows the file holds. They come first, the error at the next row; the stream that failed
    frees its slot (streams=1 opens another after it)."""
    code = """
    const seen = [];
    let error = null;
    try { for await (const v of files.jsonl('bad.jsonl')) seen.push(v.n); }
    catch (e) { error = e.message; }
    const again = [];
    for await (const v of files.jsonl('events.jsonl')) again.push(v.n);
    return { seen, error, again };
    """
    got = value(code, streams=1)
    assert got["seen"] == [1]
    assert "bad.jsonl line 2 is not JSON" in got["error"]
    assert got["again"] == [1, 2, 3]
    left = "for await (const v of files.jsonl('bad.jsonl')) return v.n; return 0"
    assert value(left + ";", streams=1) == 1  # left before the bad line: no error
    bad = "for await (const v of files.jsonl('bad.jsonl')) {}"
    ran = run(bad)
    assert ran.error is not None and "bad.jsonl line 2 is not JSON" in ran.error.message
    # A stream left after the batch before its error keeps its slot until its error is read:
    # closed with its error kept aside, any number of them escaped the streams limit, each
    # holding the frames of the batch that met it.
    left = """
    const its = [1, 2, 3].map(() => files.jsonl('bad.jsonl')[Symbol.asyncIterator]());
    try { for (const it of its) await it.next(); } catch (e) { return e.message }
    """
    assert "streams limit met" in value(left, streams=2)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"a": NaN}', "NaN is not JSON"),
        ("[1, -Infinity]", "-Infinity is not JSON"),
        ("[1e400]", "is infinity when parsed as double"),
        ("[" * 5000 + "]" * 5000, "nests too deeply"),
        ('{"a": 1', "is not JSON"),
    ],
)
def test_a_long_json_line_is_refused_as_a_short_one_is(
    monkeypatch: pytest.MonkeyPatch, line: str, says: str
) -> None:
    """A line past LONG_TEXT is parsed by the standard library (orjson's buffer does
    not fit a Python script's heap), which takes NaN, Infinity and 1e400 and ends deep
    nesting with a RecursionError: each is refused with a FileError, as orjson refuses it."""
    monkeypatch.setattr(files_module, "LONG_TEXT", 4)
    with pytest.raises(FileError, match=f"x line 1 .*{re.escape(says)}") as caught:
        list(files_module._jsonl("x", iter([line])))
    # Each way a line cannot be given says what to do about it (two of three said nothing).
    assert str(caught.value).endswith("read the file with files.lines and parse each line")
    assert list(files_module._jsonl("x", iter(['{"a": [1.5, null]}']))) == ['{"a": [1.5, null]}']


def test_a_jsonl_line_too_deep_for_data_says_what_to_do() -> None:
    """A short line that parses but nests past MAX_DEPTH ends the stream as any bad line
    does, and says how to skip it, as they do."""
    with pytest.raises(FileError, match="x line 1 nests deeper than") as caught:
        list(files_module._jsonl("x", iter(["[" * 300 + "]" * 300])))
    assert str(caught.value).endswith("read the file with files.lines and parse each line")


def test_chunks_by_size_and_byte_offset() -> None:
    """files.chunks gives text in pieces of about `size` bytes, from byte `offset`."""
    code = "const out = []; for await (const c of files.chunks('notes.md', {size: 5, offset: 2})) out.push(c); return out"
    pieces = value(code)
    assert "".join(pieces) == BLOBS["notes.md"][2:].decode()
    assert all(len(p.encode()) <= 6 for p in pieces)


def test_break_closes_a_stream() -> None:
    """break ends a stream and frees its slot, so more than `streams` loops can run in turn."""
    code = """
    let n = 0;
    for (let i = 0; i < 6; i++) { for await (const r of files.csv("sales.csv")) { n++; break; } }
    return n;
    """
    assert value(code, streams=2) == 6


def test_streams_limit_throws_at_the_call() -> None:
    """streams: opening more files at once than the limit throws, naming the limit."""
    code = """
    const its = [1, 2, 3].map(() => files.chunks("big.txt", { size: 100000 })[Symbol.asyncIterator]());
    try { for (const it of its) await it.next(); } catch (e) { return e.message }
    """
    message = value(code, streams=2)
    assert "streams limit met" in message and message.endswith(REMEDIES["streams"])
    assert "the script has 2 files open, the most one script may have open at once" in message
    one = value(code, streams=1)
    assert "the script has 1 file open, the most one script may have open at once" in one


def test_xlsx_rows_and_sheets() -> None:
    """files.xlsx keeps numbers and booleans, makes dates ISO strings, empty cells null, skips
    empty rows; files.sheets names the worksheets."""
    code = """
    const rows = []; for await (const r of files.xlsx("book.xlsx")) rows.push(r);
    const stock = []; for await (const r of files.xlsx("book.xlsx", { sheet: "Stock", header: false })) stock.push(r);
    return { rows, stock, sheets: await files.sheets("book.xlsx") };
    """
    result = value(code)
    assert result["sheets"] == ["Orders", "Stock"]
    assert result["rows"] == [
        {"id": 1, "when": "2026-01-02", "paid": True, "total": 12.5, "note": "first"},
        {"id": 2, "when": "2026-01-03", "paid": False, "total": 7, "note": None},
    ]
    assert result["stock"] == [["sku", "count"], ["a-1", 3]]


def test_xlsx_unknown_sheet_and_not_a_workbook() -> None:
    """A sheet that is not there, or a file that is not xlsx, throws a clear error."""
    missing = "try { for await (const r of files.xlsx('book.xlsx', {sheet: 'Nope'})) {} } catch (e) { return e.message }"
    assert "no sheet 'Nope'" in value(missing)
    notxlsx = "try { await files.sheets('sales.csv') } catch (e) { return e.message }"
    assert "not an xlsx" in value(notxlsx)


_WORKBOOK = (
    '<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<sheets><sheet name="S" r:id="rId1"/></sheets></workbook>'
)
_RELS = (
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Target="worksheets/sheet1.xml"/></Relationships>'
)

_STYLES = (
    '<styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
    '<numFmts><numFmt numFmtId="x" formatCode="d"/></numFmts></styleSheet>'
)


def _workbook(sheet_data: str | None, parts: dict[str, str] | None = None) -> bytes:
    """A minimal xlsx of one sheet holding ``sheet_data`` (None: a sheet part that is not
    XML), with ``parts`` replacing parts (an empty one is left out) or adding them."""
    members = {
        "xl/workbook.xml": _WORKBOOK,
        "xl/_rels/workbook.xml.rels": _RELS,
        "xl/worksheets/sheet1.xml": "<worksheet"
        if sheet_data is None
        else '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        f"<sheetData>{sheet_data}</sheetData></worksheet>",
    }
    members.update(parts or {})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, text in members.items():
            if text:
                z.writestr(name, text)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "data",
    [
        _workbook('<row r="x"><c r="A1"><v>1</v></c></row>'),  # a row number that is not one
        _workbook('<row r="1"><c r="A1"><v>abc</v></c></row>'),  # a number that is not one
        _workbook('<row r="1"><c r="A1" t="s"><v>q</v></c></row>'),  # a string index
        _workbook('<row r="1"><c r="A1" s="zz"><v>1</v></c></row>'),  # a style index
        _workbook(None),  # a sheet that is not XML
        _workbook("", {"xl/_rels/workbook.xml.rels": ""}),  # no relationships part
        _workbook("", {"xl/styles.xml": _STYLES}),  # a number format id that is not one
        _workbook('<row r="1"><c r="ZZZZZZZZ1"><v>1</v></c></row>'),  # past the last column
        _workbook('<row r="99999999999"><c><v>1</v></c></row>'),  # past the last row
        _workbook("").replace(b"PK\x01\x02", b"PK\x01\x00", 1),  # a broken central directory
    ],
    ids=["row", "number", "string", "style", "xml", "rels", "format", "column", "far-row", "zip"],
)
def test_a_malformed_workbook_throws_an_error_the_script_can_catch(data: bytes) -> None:
    """Bytes that are not a workbook this can read fail the read with an Error naming the
    file, which the script can catch, never the run with 'the sandbox failed' (which was what
    a bad number, index or XML part in a sheet gave); a cell past Excel's last column or row
    is refused rather than padded out to it."""
    info = FileInfo(id="odd.xlsx", mime="application/octet-stream", size=len(data))
    code = """
    const said = [];
    try { await files.sheets("odd.xlsx"); said.push("sheets ok") } catch (e) { said.push(e.message) }
    try { for await (const r of files.xlsx("odd.xlsx")) {} said.push("rows ok") } catch (e) { said.push(e.message) }
    return said;
    """
    script = Script(
        id="odd", code=code, files=[info], clock=Clock(now_ms=0, seed=1), limits=Limits()
    )
    ran = run_in_process(script, lambda _f, offset, length: data[offset : offset + length])
    assert ran.outcome == "finished", ran.error
    assert ran.value[1] != "rows ok"
    for message in ran.value:
        assert message == "sheets ok" or "odd.xlsx" in message, message


def _count_rows(data: bytes, memory: int) -> Any:
    info = FileInfo(id="big.xlsx", mime="application/octet-stream", size=len(data))
    code = """
    let n = 0, last;
    try { for await (const r of files.xlsx("big.xlsx", { header: false })) { n++; last = r } }
    catch (e) { return [n, e.name, e.message] }
    return [n, last];
    """
    script = Script(
        id="big",
        code=code,
        files=[info],
        clock=Clock(now_ms=0, seed=1),
        limits=Limits(memory=memory, file_bytes=64 * MiB),
    )
    return run_in_process(script, lambda _f, offset, length: data[offset : offset + length])


def test_a_sheet_is_read_as_it_streams_in_a_bounded_heap() -> None:
    """A sheet part was parsed whole, an object for each element: 120 KB zipped, sixty
    million bytes of empty cells, ran the run's process out of memory at a place that
    changed from run to run (a memory limit, 'Python call failed', live and replay apart).
    Rows are read as they end and let go; a row of more cells than a sheet has columns is
    refused as it grows."""
    rows = "".join(f'<row r="{i}"><c r="A{i}"><v>{i}</v></c></row>' for i in range(1, 100_001))
    data = _workbook(rows)
    ran = _count_rows(data, 16 * MiB)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [100_000, [100_000]]
    wide = _workbook('<row r="1">' + "<c/>" * 2_000_000 + "</row>")
    ran = _count_rows(wide, 16 * MiB)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [
        0,
        "Error",
        "big.xlsx: a row of xl/worksheets/sheet1.xml has more than 16,384 cells, past the "
        "last column, XFD",
    ]


@pytest.mark.parametrize(
    "data",
    [
        # Excel's "CSV (Macintosh)": every line ends in a CR alone. It was one line, refused:
        # "line 1 cannot be read as CSV: new-line character seen in unquoted field".
        b'name,note\rann,1\r"bo\rb","2\r\n3"\r',
        b'\xef\xbb\xbfname,note\r\nann,1\r\n"bo\rb","2\r\n3"\r\n',
        b'name,note\nann,1\n"bo\rb","2\r\n3"',
    ],
    ids=["cr", "crlf-bom", "lf"],
)
def test_csv_lines_may_end_in_a_cr_a_crlf_or_a_lf(data: bytes) -> None:
    """A CSV's lines may end in a CR alone, a CRLF or a LF, as Python's reader takes them
    from a file opened with newline="": the same rows each way (line ends inside quotes
    are kept; a byte-order mark is no part of the first name), also when the file comes in
    pieces that split a CRLF or a field."""
    info = FileInfo(id="mac.csv", mime="text/csv", size=len(data))
    code = """
    const rows = [];
    for await (const r of files.csv("mac.csv")) rows.push(r);
    return rows;
    """
    script = Script(
        id="mac", code=code, files=[info], clock=Clock(now_ms=0, seed=1), limits=Limits()
    )
    expected = [{"name": "ann", "note": "1"}, {"name": "bo\rb", "note": "2\r\n3"}]
    for piece in (len(data), 1, 2, 3):
        # At most `piece` bytes a read: a CRLF, a quoted field and the mark split every way.
        ran = run_in_process(
            script,
            lambda _f, offset, length, piece=piece: data[offset : offset + min(length, piece)],
        )
        assert ran.outcome == "finished", ran.error
        assert ran.value == expected, (piece, ran.value)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"a,b\n" + b"x" * 200_000 + b",1\n", "line 2 cannot be read as CSV: a field is over"),
        (b"a,b\r" + b"x" * 200_000 + b",1\r", "line 2 cannot be read as CSV: a field is over"),
    ],
    ids=["field", "field-cr"],
)
def test_a_csv_the_reader_refuses_throws_an_error_the_script_can_catch(
    data: bytes, said: str
) -> None:
    """A CSV Python's reader refuses (a field over its 128 KiB) fails
    the read with an Error naming the file and the line, which the script can catch. It
    ended the run: 'InternalError: the sandbox failed: Error: field larger than field limit';
    then it said that, with Python's limit (131072), and nothing the script could do."""
    info = FileInfo(id="odd.csv", mime="text/csv", size=len(data))
    code = """
    try { for await (const r of files.csv("odd.csv")) {} } catch (e) { return e.message }
    return "read";
    """
    script = Script(
        id="odd", code=code, files=[info], clock=Clock(now_ms=0, seed=1), limits=Limits()
    )
    ran = run_in_process(script, lambda _f, offset, length: data[offset : offset + length])
    assert ran.outcome == "finished", ran.error
    assert ran.value.startswith(f"odd.csv {said}"), ran.value
    # In the script's terms: Python's bound, 131072, is no number the script can change.
    assert ran.value.endswith(
        "over the 128 KiB a CSV field may have (an unclosed quote?); read the file with "
        "files.lines or files.chunks"
    ), ran.value


def test_small_chunks_are_read_from_the_runner_in_large_reads() -> None:
    """files.chunks with a small size reads the file from the runner in pieces of 256 KiB
    (as the other streams do), within file_bytes, and cuts the chunks from them. Each chunk
    was a read of its own, a round trip through the runner: 1-byte chunks of a 1 MiB file
    kept the host answering reads for the whole wall deadline (12.8 s of host CPU, measured)
    and the script met it without using its CPU."""
    data = b"abcdefgh" * 32 * 1024  # 256 KiB
    asked: list[int] = []

    def fetch(_file: str, offset: int, length: int) -> bytes:
        asked.append(length)
        return data[offset : offset + length]

    info = FileInfo(id="a.bin", mime="application/octet-stream", size=len(data))
    code = """
    let n = 0, first = null;
    for await (const c of files.chunks("a.bin", { size: 1, offset: 3 })) { n++; first ??= c; }
    return [n, first];
    """
    script = Script(id="c", code=code, files=[info], clock=Clock(now_ms=0, seed=1), limits=Limits())
    ran = run_in_process(script, fetch)
    assert ran.outcome == "finished", ran.error
    assert ran.value == [len(data) - 3, "d"]
    assert len(asked) == 1 and ran.stats.file_bytes == len(data) - 3
    # Within file_bytes: the read ahead takes no more than the run may still read.
    asked.clear()
    tight = Script(
        id="t",
        code=code,
        files=[info],
        clock=Clock(now_ms=0, seed=1),
        limits=Limits(file_bytes=1000),
    )
    ran = run_in_process(tight, fetch)
    assert ran.outcome == "failed" and ran.limit is not None and ran.limit.name == "file_bytes"
    assert asked == [1000]


def test_show_records_the_files_shown() -> None:
    """files.show(id) puts the file in front of the model when the script ends."""
    ran = run("files.show('notes.md'); files.show('chart.png'); files.show('notes.md'); return 1")
    assert ran.shown == ["notes.md", "chart.png"]


def test_shown_files_limit() -> None:
    """shown_files: showing more files than the limit throws, naming it."""
    code = "files.show('notes.md'); try { files.show('sales.csv') } catch (e) { return e.message }"
    assert "shown_files limit met" in value(code, shown_files=1)


def test_shown_text_limit() -> None:
    """shown: once the file text shown fills the budget, showing more throws."""
    code = "files.show('big.txt'); try { files.show('notes.md') } catch (e) { return e.message }"
    assert "shown limit met" in value(code, shown=1000)


def test_shown_media_limit() -> None:
    """shown_media: media over the budget throws, naming the limit."""
    code = "try { files.show('chart.png') } catch (e) { return e.message }"
    message = value(code, shown_media=1000)
    assert "shown_media limit met" in message and message.endswith(REMEDIES["shown_media"])


def test_shown_media_a_byte_over_says_so_in_bytes() -> None:
    """Media a byte over shown_media says so in bytes: a file of 2 MiB and a byte read
    'would put 2 MiB of media in front of the model, over 2 MiB'."""
    size = len(BLOBS["chart.png"])
    code = "try { files.show('chart.png') } catch (e) { return e.message }"
    message = value(code, shown_media=size - 1)
    assert (
        f"showing chart.png ({size:,} bytes) would put {size:,} bytes of media in front of the "
        f"model, over {size - 1:,} bytes" in message
    ), message


def test_file_bytes_limit_ends_the_run() -> None:
    """file_bytes: reading more than the limit in one run ends it, even inside try/catch."""
    code = "try { await files.text('big.txt') } catch (e) { return 'swallowed' }"
    ran = run(code, file_bytes=100_000)
    assert ran.outcome == "failed"
    assert ran.limit is not None and ran.limit.name == "file_bytes"
    assert ran.limit.message.endswith(REMEDIES["file_bytes"])


def test_file_bytes_are_counted() -> None:
    """A run reports the file bytes it read."""
    ran = run("await files.text('sales.csv'); return 1")
    assert ran.stats.file_bytes == len(SALES)


def test_gone_file_throws_in_the_script() -> None:
    """A file that is gone throws in the script, and the script can catch it."""
    ran = run(
        "try { await files.text('notes.md') } catch (e) { return e.message }", gone={"notes.md"}
    )
    assert ran.value == "notes.md is gone: deleted"


@pytest.mark.parametrize(
    "bad", ["files.csv('sales.csv', 3)", "files.csv('sales.csv', {limit: -1})"]
)
def test_bad_stream_options(bad: str) -> None:
    """Stream options are an object of counts; anything else throws at the call."""
    code = f"try {{ for await (const r of {bad}) {{}} }} catch (e) {{ return e.message }}"
    assert "files.csv" in value(code)


@pytest.mark.parametrize(
    "use",
    [
        "text.split('\\n')",
        "text.length",
        "JSON.parse(text)",
        "[...text]",
        "JSON.stringify({ text })",
    ],
)
def test_files_text_without_await_says_the_await_is_missing(use: str) -> None:
    """files.text gives a promise, as a tool call does, and one used as the text it gives
    says the await is missing, as a call's does: `text.split` was 'not a function',
    `text.length` undefined, and JSON.parse(text) said a tool's result is already data."""
    ran = run(f"const text = files.text('sales.csv');\nreturn {use};")
    assert ran.outcome == "failed" and ran.error is not None, ran
    assert ran.error.name == "TypeError", ran.error
    assert 'files.text(...) gives a promise, not its result: write "await files.text(...)"' in (
        ran.error.message
    )
    assert "tool's result" not in ran.error.message
    shown = run("console.log(files.sheets('book.xlsx'));\nreturn 1")
    assert shown.printed == (
        'Promise { files.sheets(...) gives a promise, not its result: write "await '
        'files.sheets(...)" }\n'
    )


def test_files_text_awaited_reads_and_fails_as_before() -> None:
    assert value("return (await Promise.all([files.text('sales.csv')]))[0].length") == len(SALES)
    assert value("return files.text('sales.csv').then((t) => t.length)") == len(SALES)
    caught = "try { await files.text('nope.csv'); } catch (e) { return e.message }"
    assert value(caught).startswith("no file 'nope.csv'")


@pytest.mark.parametrize(
    "code",
    [
        "const rows = files.csv('sales.csv');\nfor (const r of rows) {}",
        "const rows = await files.csv('sales.csv');\nreturn rows.length;",
        "const rows = await files.csv('sales.csv');\nreturn rows.map((r) => r.region);",
        "const rows = await files.csv('sales.csv');\nreturn rows;",
    ],
)
def test_a_stream_read_as_an_array_says_how_it_is_read(code: str) -> None:
    """A stream used as an array of its rows (no `for await`; returned) says how it is read:
    it was 'value is not iterable', undefined, 'not a function', or {} returned in silence."""
    ran = run(code)
    assert ran.outcome == "failed" and ran.error is not None, ran
    assert ran.error.name == "TypeError", ran.error
    assert (
        "files.csv(...) gives its rows one at a time, not an array: read them with "
        "`for await (const x of files.csv(...))`" in ran.error.message
    ), ran.error


@pytest.mark.parametrize(
    ("language", "code", "booleans"),
    [
        (
            "javascript",
            'for await (const row of files.csv("sales.csv", { header: 1 })) {}',
            "true or false",
        ),
        (
            "javascript",
            'for await (const row of files.xlsx("book.xlsx", { header: "no" })) {}',
            "true or false",
        ),
        ("python", "async for row in files.csv('sales.csv', header=1):\n    pass", "True or False"),
        (
            "python",
            "async for row in files.xlsx('book.xlsx', header='no'):\n    pass",
            "True or False",
        ),
    ],
)
def test_a_header_that_is_no_boolean_is_told_in_the_scripts_spelling(
    language: Literal["javascript", "python"], code: str, booleans: str
) -> None:
    """files.csv's and files.xlsx's `header` is a boolean, which the message spells as the
    script's language does: a Python script was told `header is true or false`, names it
    has not (its are True and False)."""
    infos = [FileInfo(id=k, mime=MIME[k.rsplit(".", 1)[1]], size=len(BLOBS[k])) for k in BLOBS]
    script = Script(
        id="f", language=language, code=code, files=infos, clock=Clock(now_ms=0, seed=1)
    )

    def fetch(file_id: str, offset: int, length: int) -> bytes:
        return BLOBS[file_id][offset : offset + length]

    ran = run_in_process(script, fetch)
    assert ran.outcome == "failed" and ran.error is not None
    assert ran.error.message.endswith(f"header is {booleans}"), ran.error.message
