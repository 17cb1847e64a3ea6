"""Files inside a run: what ``files.list/stat/text/show`` and the file streams read.

The process has no file system: every byte comes from its runner through ``read`` requests
(``fetch`` below), and is counted against ``file_bytes``. The process decodes the files
(text, lines, JSON lines, CSV, xlsx), so decoding counts toward its CPU and memory.

Streams hand rows to the script in batches; each takes ``{ limit, offset }``, counts of
records to read and to skip (a CSV or xlsx header, blank JSON lines and empty sheet rows are
not counted). At most ``streams`` are open at once.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import json
import re
import zipfile
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any
from xml.etree import ElementTree

import orjson

from sandbox import jsontext
from sandbox.jsontext import LONG_TEXT, finite, no_constant
from sandbox.names import closest_names, spelled_otherwise
from sandbox.protocol import (
    FileInfo,
    Limits,
    data_problem,
    is_media,
    limit_message,
    size_text,
    sizes_over,
    text_encoding,
)

CHUNK = 256 * 1024
BATCH_BYTES = 64 * 1024
BATCH_ITEMS = 512
MAX_XLSX_XML = 64 * 1024 * 1024  # bytes of one uncompressed sheet part; a zip bomb stops here


class FileError(Exception):
    """A bad use of ``files``: the script sees a catchable ``Error`` with this message."""


class FileLimitError(FileError):
    """A file limit met at one use of ``files`` (a file shown, a stream opened): catchable
    there, as a call's limit is; uncaught, the run ends on limit ``name``."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class FileLimit(Exception):
    """A run-ending file limit (``file_bytes``); ``name`` is the limit's name."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


Fetch = Callable[[str, int, int], bytes]


_size = size_text


class Files:
    """The files of one run, and the budgets that bound reading and showing them."""

    def __init__(
        self, infos: list[FileInfo], limits: Limits, fetch: Fetch, language: str = "javascript"
    ) -> None:
        self.infos = {f.id: f for f in infos}
        # The script's language, whose syntax a message about what it passed is written in.
        self.language = language
        self.order = [f.id for f in infos]
        self.limits = limits
        self._fetch = fetch
        self.bytes_read = 0
        self._ahead: tuple[str, int, bytes] | None = None  # (file, offset, bytes) read ahead
        self.streams: dict[int, Iterator[Any]] = {}
        self._next_handle = 1
        self.shown: list[str] = []
        self.shown_text = 0
        self.shown_media = 0

    # ---- reading bytes ----

    def info(self, file_id: Any, use: str = "stat") -> FileInfo:
        """The file ``file_id`` names, for ``files.<use>``; a FileError, in the script's
        language, for anything else."""
        if not isinstance(file_id, str):
            raise FileError(self._not_an_id(file_id, use))
        info = self.infos.get(file_id)
        same = spelled_otherwise(file_id, self.order) if info is None else None
        if same is not None:  # of the record's files: every run finds the same
            info = self.infos[same]
        if info is None:
            near = closest_names(file_id, self.order)
            hint = f" (did you mean {', '.join(map(repr, near))}?)" if near else ""
            raise FileError(f"no file {file_id!r}{hint}; files.list() lists the files")
        return info

    def _booleans(self) -> str:
        """The two booleans as the script's language writes them (a Python script was told
        `header is true or false`, which are no names of its)."""
        return "True or False" if self.language == "python" else "true or false"

    def _not_an_id(self, given: Any, use: str) -> str:
        """What is wrong with ``given``, which is no file id, written as the script's language
        writes it (a JavaScript script was shown a Python dict, {'id': 'data.csv', ...})."""
        python = self.language == "python"
        head = f'a file id is a string, as in files.{use}("data.csv")'
        if isinstance(given, dict) and isinstance(given.get("id"), str):
            # An entry of files.list(), given whole.
            entry = 'files.list()[0]["id"]' if python else "files.list()[0].id"
            return f"{head}, not an entry of files.list(): give its id, as files.{use}({entry})"
        if given is None:
            # JavaScript's undefined and null both come as None: the prelude names them first
            # (fileOp), so this is a Python script's None, named as Python writes it.
            return f"{head}; None was given"
        try:
            shown = repr(given) if python else orjson.dumps(given).decode()
        except TypeError:  # no JSON: not what a JavaScript script's arguments arrive as
            shown = type(given).__name__
        return f"{head}, not {shown[:80]}"

    def read(self, file_id: str, offset: int, length: int) -> bytes:
        """Bytes of a file, counted against ``file_bytes``; ``b""`` at the end.

        A short read takes :data:`CHUNK` bytes from the runner (within what the run may still
        read), and the reads after it that fall inside them are answered from them: each
        read is a round trip through the runner, and a script reading 1-byte chunks made
        the host answer a million of them."""
        info = self.info(file_id)
        length = max(0, min(length, info.size - offset))
        if length == 0:
            return b""
        ahead = self._ahead
        if ahead is not None and ahead[0] == info.id:
            start = offset - ahead[1]
            if start >= 0 and start + length <= len(ahead[2]):
                return ahead[2][start : start + length]
        if self.bytes_read + length > self.limits.file_bytes:
            # What the script asked for, in its terms: the piece read at once (256 KiB of a
            # stream) was said as if it were the total.
            # (In bytes when the file and the limit would read the same: "2 KiB, past 2 KiB".)
            size, bound = sizes_over(info.size, self.limits.file_bytes)
            raise FileLimit(
                "file_bytes",
                limit_message(
                    "file_bytes",
                    f"reading {info.id} ({size}) from byte {offset:,} would take this run past "
                    f"the {bound} of files one run may read ({size_text(self.bytes_read)} read "
                    "so far)",
                ),
            )
        want = min(max(length, CHUNK), info.size - offset, self.limits.file_bytes - self.bytes_read)
        data = self._fetch(info.id, offset, want)
        self.bytes_read += len(data)
        if len(data) > length:
            self._ahead = (info.id, offset, data)
            return data[:length]
        return data

    def pieces(self, file_id: str, offset: int = 0) -> Iterator[bytes]:
        info = self.info(file_id)
        while offset < info.size:
            data = self.read(file_id, offset, CHUNK)
            if not data:
                return
            offset += len(data)
            yield data

    def whole(self, file_id: str) -> bytes:
        return b"".join(self.pieces(file_id))

    # ---- the calls of `files` ----

    def listing(self) -> list[dict[str, Any]]:
        return [self._public(self.infos[i]) for i in self.order]

    def stat(self, file_id: Any) -> dict[str, Any]:
        return self._public(self.info(file_id, "stat"))

    @staticmethod
    def _public(info: FileInfo) -> dict[str, Any]:
        out: dict[str, Any] = {"id": info.id, "mime": info.mime, "size": info.size}
        if info.skill is not None:
            out["skill"] = info.skill
        return out

    def text(self, file_id: Any) -> str:
        info = self.info(file_id, "text")
        bound = self.limits.memory // 8
        if info.size > bound:
            raise FileError(
                f"{info.id} is {_size(info.size)}, over the {_size(bound)} files.text reads "
                "(an eighth of memory); read it in pieces with files.lines, files.chunks or "
                "files.csv"
            )
        data = self.whole(info.id)
        return data.decode(text_encoding(data), "replace")

    def show(self, file_id: Any) -> None:
        info = self.info(file_id, "show")
        if info.id in self.shown:
            return
        limits = self.limits
        if len(self.shown) + 1 > limits.shown_files:
            raise FileLimitError(
                "shown_files",
                limit_message(
                    "shown_files",
                    f"the script already shows {len(self.shown)} "
                    f"file{'' if len(self.shown) == 1 else 's'}, the most one script may show "
                    f"is {limits.shown_files}",
                ),
            )
        if is_media(info.mime):
            total = self.shown_media + info.size
            if total > limits.shown_media:
                # In bytes when they would read the same ("2 MiB ... over 2 MiB").
                over, bound = sizes_over(total, limits.shown_media)
                raise FileLimitError(
                    "shown_media",
                    limit_message(
                        "shown_media",
                        f"showing {info.id} ({over if total == info.size else _size(info.size)})"
                        f" would put {over} of media in front of the model, over {bound}",
                    ),
                )
            self.shown_media += info.size
        else:
            room = limits.shown - self.shown_text
            if room <= 0:
                raise FileLimitError(
                    "shown",
                    limit_message(
                        "shown",
                        f"the files shown already fill the {_size(limits.shown)} of file text "
                        "the model may see",
                    ),
                )
            self.shown_text += min(info.size, room)
        self.shown.append(info.id)

    def sheets(self, file_id: Any) -> list[str]:
        info = self.info(file_id, "sheets")
        book = _workbook(info.id, self.whole(info.id))
        return [name for name, _ in book.sheets]

    # ---- streams ----

    def open(self, kind: str, file_id: Any, options: dict[str, Any]) -> int:
        info = self.info(file_id, kind)
        if len(self.streams) >= self.limits.streams:
            raise FileLimitError(
                "streams",
                limit_message(
                    "streams",
                    f"the script has {_files(len(self.streams))} open, the most one script may "
                    "have open at once",
                ),
            )
        if not isinstance(options, dict):
            raise FileError(f"files.{kind} takes an object of options, as {{ limit: 10 }}")
        _check_options(kind, options)
        limit = _count(options, "limit", kind)
        skip = _count(options, "offset", kind) if kind != "chunks" else 0
        records = self._records(kind, info, options)
        handle = self._next_handle
        self._next_handle += 1
        self.streams[handle] = _window(records, skip, limit)
        return handle

    def next(self, handle: int) -> tuple[list[Any], bool]:
        """The next batch of a stream, and whether the stream is done (and closed). A
        stream's error (a JSONL line that is not JSON) comes after the items before it: a
        batch that met one ends there, and the next batch raises it."""
        stream = self.streams.get(handle)
        if stream is None:
            return [], True
        batch: list[Any] = []
        size = 0
        try:
            for item in stream:
                batch.append(item)
                size += len(jsontext.dumps(item)) if not isinstance(item, str) else len(item)
                if size >= BATCH_BYTES or len(batch) >= BATCH_ITEMS:
                    return batch, False
        except FileError as e:
            if batch:
                # The rows before a bad line were read well: raised with the batch, they were
                # lost, and a script that caught the error had not seen rows the file holds.
                # Its error is the stream's next batch, the slot counted until then; made
                # anew, it holds none of the frames or the parser's error (their batches).
                self.close(handle)
                self.streams[handle] = _raising(FileError(str(e)))
                return batch, False
            self.close(handle)  # a stream that failed is closed, so its slot is free again
            raise
        except BaseException:
            self.close(handle)
            raise
        self.close(handle)
        return batch, True

    def close(self, handle: int) -> None:
        stream = self.streams.pop(handle, None)
        if stream is not None and hasattr(stream, "close"):
            stream.close()

    def _records(self, kind: str, info: FileInfo, options: dict[str, Any]) -> Iterator[Any]:
        if kind == "lines":
            return _lines(self.pieces(info.id))
        if kind == "jsonl":
            return _jsonl(info.id, _lines(self.pieces(info.id)))
        if kind == "csv":
            header = options.get("header", True)
            delimiter = options.get("delimiter", ",")
            if not isinstance(header, bool):
                raise FileError(f"files.csv: header is {self._booleans()}")
            if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
                # A quote or a line end as the delimiter gave rows of garbage.
                raise FileError(
                    "files.csv: delimiter is one character other than a quote or a line end, "
                    'as ";" or "\\t"'
                )
            return _csv(info.id, _csv_lines(self.pieces(info.id)), header, delimiter)
        if kind == "chunks":
            size = options.get("size", 64 * 1024)
            offset = options.get("offset", 0)
            for name, value, least in (("size", size, 1), ("offset", offset, 0)):
                if not _whole(value) or value < least:
                    # A size of 0 read 1-byte chunks, and 1.5 was 1, in silence.
                    raise FileError(
                        f"files.chunks: {name} is a whole number of bytes, {least} or more"
                    )
            return _chunks(self, info, int(size), int(offset))
        if kind == "xlsx":
            header = options.get("header", True)
            if not isinstance(header, bool):
                raise FileError(f"files.xlsx: header is {self._booleans()}")
            sheet = options.get("sheet")
            book = _workbook(info.id, self.whole(info.id))
            return _rows(_parsed(info.id, book.rows(sheet)), header)
        raise FileError(f"files.{kind} is not a way to read a file")


# Each stream's options: one misspelled (`delimeter`, `limt`) was passed over in silence,
# and the stream read as if it were not there.
STREAM_OPTIONS = {
    "lines": ("limit", "offset"),
    "jsonl": ("limit", "offset"),
    "csv": ("limit", "offset", "header", "delimiter"),
    "chunks": ("limit", "size", "offset"),
    "xlsx": ("limit", "offset", "header", "sheet"),
}


def _check_options(kind: str, options: dict[str, Any]) -> None:
    known = STREAM_OPTIONS.get(kind)
    if known is None:
        raise FileError(f"files.{kind} is not a way to read a file")
    for key in options:
        if key not in known:
            near = closest_names(str(key), known, 1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise FileError(
                f"files.{kind} has no option {str(key)[:80]!r}{hint}; its options are "
                f"{', '.join(known)}"
            )


def _files(n: int) -> str:
    return f"{n:,} file" if n == 1 else f"{n:,} files"


def _count(options: dict[str, Any], key: str, kind: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None if key == "limit" else 0
    if not _whole(value) or value < 0:
        raise FileError(f"files.{kind}: {key} is a whole count of records, 0 or more")
    return int(value)


def _whole(value: Any) -> bool:
    """A whole number, as a script writes one (JavaScript's 2 may come as 2.0): 2.5 was
    read as 2 in silence."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _window(records: Iterator[Any], skip: int | None, limit: int | None) -> Iterator[Any]:
    for index, record in enumerate(records):
        if skip and index < skip:
            continue
        if limit is not None and index - (skip or 0) >= limit:
            return
        yield record


def _lines(pieces: Iterator[bytes]) -> Iterator[str]:
    """The lines of a file, without their ends (``\\n`` or ``\\r\\n``), as text lines and
    JSON lines have them (a CR alone is no line end: JSON may hold it as white space), in
    the encoding its first piece says (``text_encoding``)."""
    decoder: codecs.IncrementalDecoder | None = None
    # The line under way, in pieces: joined once it ends, so a long line costs its length
    # (joining each piece onto it, and splitting it again, cost its length squared).
    held: list[str] = []
    first = True
    for piece in pieces:
        if decoder is None:
            decoder = codecs.getincrementaldecoder(text_encoding(piece))("replace")
        text = decoder.decode(piece)
        if first:
            text = text.removeprefix("\ufeff")
            first = False
        if "\n" not in text:
            held.append(text)
            continue
        lines = text.split("\n")
        lines[0] = "".join(held) + lines[0]
        held = [lines.pop()]
        for line in lines:
            yield line.removesuffix("\r")
    rest = "".join(held) + (decoder.decode(b"", final=True) if decoder is not None else "")
    if rest:
        yield rest.removesuffix("\r")


def _csv_lines(pieces: Iterator[bytes]) -> Iterator[str]:
    """The lines of a CSV file with their ends, each end ``\\n``, ``\\r\\n`` or a CR alone
    (as Excel's "CSV (Macintosh)" writes them): what Python's CSV reader takes, as from a
    file opened with ``newline=""``, which is how this reads it; in the encoding its first
    piece says (``text_encoding``)."""
    first = next(pieces, b"")
    encoding = text_encoding(first)
    yield from io.TextIOWrapper(
        io.BufferedReader(_PieceStream(itertools.chain([first], pieces)), CHUNK),
        # A byte-order mark at the start is no part of the first name.
        encoding="utf-8-sig" if encoding == "utf-8" else encoding,
        errors="replace",
        newline="",
    )


class _PieceStream(io.RawIOBase):
    """A file's pieces as a raw stream, read once from the start."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._piece = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._piece:
            piece = next(self._pieces, None)
            if piece is None:
                return 0
            self._piece = memoryview(piece)
        size = min(len(buffer), len(self._piece))
        buffer[:size] = self._piece[:size]
        self._piece = self._piece[size:]
        return size


class RawJson(str):
    """JSON text the script is handed as it is (a JSON line past :data:`LONG_TEXT`, already
    checked): encoding its value again would take orjson's buffer (see LONG_TEXT)."""


_IN_ONE_LINE = re.compile(r": line 1 column (\d+) \(char \d+\)$")


# What a script does about a JSONL line the stream cannot give, whatever is wrong with it.
_SKIP_BAD_LINES = (
    "; a stream ends at its first bad line: to skip such lines, read the file with files.lines "
    "and parse each line"
)


def _jsonl(file_id: str, lines: Iterator[str]) -> Iterator[Any]:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        long = len(line) > LONG_TEXT
        try:
            # See LONG_TEXT: for tens of MiB, orjson's parse failed in a Python script ("not
            # JSON: Not enough memory"), whose heap is the process's.
            item = (
                json.loads(line, parse_constant=no_constant, parse_float=finite)
                if long
                else orjson.loads(line)
            )
        except ValueError as e:  # both parsers' errors are ValueErrors
            # The parsers place the fault in their input, one line: "line 1 column 7 (char
            # 6)" after "line 3 is not JSON" read as two places at once.
            why = _IN_ONE_LINE.sub(r" at column \1", str(e))
            raise FileError(
                f"{file_id} line {number} is not JSON: {why}{_SKIP_BAD_LINES}"
            ) from None
        except RecursionError:  # the standard library's depth bound (orjson's is an error)
            raise FileError(
                f"{file_id} line {number} nests too deeply to be read as JSON data{_SKIP_BAD_LINES}"
            ) from None
        if long:
            # As it is: checking it as data would encode it again (orjson parsed it, within
            # its own depth; a call or a value that takes it from the script is checked then).
            yield RawJson(line.strip())
            continue
        problem = data_problem(item)
        if problem is not None:
            raise FileError(f"{file_id} line {number} {problem}{_SKIP_BAD_LINES}")
        yield item


def _csv(file_id: str, lines: Iterator[str], header: bool, delimiter: str) -> Iterator[Any]:
    ended: list[bool] = []
    reader = csv.reader(itertools.chain(lines, _end_marked(ended)), delimiter=delimiter)
    names: _Columns | None = None
    for row in _csv_rows(file_id, reader, ended):
        if header and names is None:
            names = _Columns(row)
            continue
        if names is None:
            yield row
        else:
            yield names.record(row, "")


class _Columns:
    """The keys of a header row's records, one per column, each its own: an empty cell's
    column is ``column3`` (its number), a name seen before gets ``.1``, ``.2``... (as pandas
    reads ``a,a``: ``a``, ``a.1``), and cells past the header are named by their numbers, so
    no cell of a record is dropped for want of a key of its own."""

    def __init__(self, header: list[Any]) -> None:
        self.names: list[str] = []
        self._taken: set[str] = set()
        self._suffix: dict[str, int] = {}  # the next to try after a name, so a header of
        # a thousand equal names costs a thousand tries, not half a million
        for cell in header:
            self._add(cell)
        self.width = len(self.names)

    def _add(self, cell: Any) -> None:
        number = len(self.names) + 1
        base = f"column{number}" if cell is None or cell == "" else str(cell)
        name, n = base, self._suffix.get(base, 0)
        while name in self._taken:
            n += 1
            name = f"{base}.{n}"
        self._suffix[base] = n
        self._taken.add(name)
        self.names.append(name)

    def record(self, row: list[Any], missing: Any) -> dict[str, Any]:
        """``row`` as a record: ``missing`` for the header's columns it lacks, and its cells
        past the header, if it has any."""
        while len(self.names) < len(row):
            self._add(None)
        names = self.names[: max(self.width, len(row))]
        return {name: (row[i] if i < len(row) else missing) for i, name in enumerate(names)}


def _chunks(files: Files, info: FileInfo, size: int, offset: int) -> Iterator[str]:
    decoder: codecs.IncrementalDecoder | None = None
    position = offset
    while position < info.size:
        data = files.read(info.id, position, size)
        if not data:
            break
        if decoder is None:
            # The encoding its first two bytes say: read again when the first chunk is
            # shorter (from the read ahead), and from past them only for data with a NUL
            # (UTF-16 has one in every other byte of Latin text, UTF-8 text none).
            head = data
            if (offset == 0 and len(data) < 2) or (offset > 0 and b"\x00" in data):
                head = files.read(info.id, 0, 2)
            encoding = text_encoding(head, at_start=offset == 0)
            decoder = codecs.getincrementaldecoder(encoding)("replace")
        position += len(data)
        text = decoder.decode(data, final=position >= info.size)
        if text:
            yield text


def _raising(error: FileError) -> Iterator[Any]:
    """A stream whose next item is ``error``: one that met it after items of its batch."""
    raise error
    yield  # a generator: raises when it is read


def _end_marked(ended: list[bool]) -> Iterator[str]:
    """No line: put after a file's lines, it marks in ``ended`` that the reader read past
    them all."""
    ended.append(True)
    yield from ()


def _csv_rows(file_id: str, reader: Any, ended: list[bool]) -> Iterator[list[str]]:
    """The rows of a ``csv.reader`` of a file's lines then :func:`_end_marked`'s; what it
    refuses is the file's fault, said to the script. A row the reader gives after the file's
    last line is one whose quote the file's end left open (Python's reader gives one then
    for no other reason): it held the rest of the file as a field, so a stray quote on line 2
    of a thousand read as one row, in silence."""
    while True:
        line = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            why = str(e)
            if why.startswith("field larger than field limit"):
                # Python's own words, with a bound the script can neither see nor change.
                why = (
                    f"a field is over the {_size(csv.field_size_limit())} a CSV field may have "
                    "(an unclosed quote?); read the file with files.lines or files.chunks"
                )
            raise FileError(
                f"{file_id} line {reader.line_num} cannot be read as CSV: {why}"
            ) from None
        if ended:
            raise FileError(
                f"{file_id} line {line} cannot be read as CSV: a quoted field opened there is "
                "not closed by the end of the file (a stray quote, or a file cut short); read "
                "its lines with files.lines"
            )
        yield row


def _rows(rows: Iterator[list[Any]], header: bool) -> Iterator[Any]:
    names: _Columns | None = None
    for row in rows:
        if all(cell is None for cell in row):
            continue  # empty sheet rows are not counted
        if header and names is None:
            names = _Columns(row)
            continue
        if names is None:
            yield row
        else:
            yield names.record(row, None)


# ---- xlsx: a zip of XML parts; only what rows need is read ----

_NS = {
    "m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
    "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships",
    "rel": "http://schemas.openxmlformats.org/package/2006/relationships",
}
_CELL_REF = re.compile(r"([A-Z]+)(\d+)")
_DATE_FORMAT_IDS = {14, 15, 16, 17, 18, 19, 20, 21, 22, 45, 46, 47}
_DATE_CODE = re.compile(r"(?<![\\\"])[dmyhs]", re.IGNORECASE)
_EPOCH = datetime(1899, 12, 30)
# The last column (XFD) and row of a sheet: a cell past them is no xlsx cell, and padding a
# row out to it (the cells before it are null) would run the process out of memory or time.
MAX_XLSX_COLUMNS = 16_384
MAX_XLSX_ROWS = 1_048_576


def _malformed(file_id: str, e: Exception) -> FileError:
    return FileError(f"{file_id} is not an xlsx workbook this can read ({type(e).__name__}: {e})")


def _workbook(file_id: str, data: bytes) -> _Workbook:
    """The workbook in ``data``; a :class:`FileError` naming the file if it is not one."""
    try:
        return _Workbook(data)
    except FileError as e:
        raise FileError(f"{file_id}: {e}") from None
    except MemoryError:
        raise
    except Exception as e:  # anything wrong in the bytes is the file's fault, not the run's
        raise _malformed(file_id, e) from None


def _parsed(file_id: str, rows: Iterator[list[Any]]) -> Iterator[list[Any]]:
    """The rows of a sheet, read lazily; a part of it that is malformed fails as
    :func:`_workbook` does, when the script reaches it."""
    try:
        yield from rows
    except FileError as e:
        raise FileError(f"{file_id}: {e}") from None
    except MemoryError:
        raise
    except Exception as e:
        raise _malformed(file_id, e) from None


class _Workbook:
    def __init__(self, data: bytes) -> None:
        self.zip = zipfile.ZipFile(io.BytesIO(data))
        workbook = self._xml("xl/workbook.xml")
        rels = self._xml("xl/_rels/workbook.xml.rels")
        targets = {r.get("Id"): r.get("Target", "") for r in rels.findall("rel:Relationship", _NS)}
        self.sheets: list[tuple[str, str]] = []
        for sheet in workbook.findall("m:sheets/m:sheet", _NS):
            target = targets.get(sheet.get(f"{{{_NS['r']}}}id"), "")
            target = target.lstrip("/")
            path = target if target.startswith("xl/") else "xl/" + target
            self.sheets.append((sheet.get("name", ""), path))
        self.strings = self._shared_strings()
        self.date_styles = self._date_styles()

    def _xml(self, name: str) -> ElementTree.Element:
        """A small part of the workbook (its list of sheets, its styles), parsed whole."""
        self._checked(name)
        return ElementTree.fromstring(self.zip.read(name))

    def _checked(self, name: str) -> None:
        if self.zip.getinfo(name).file_size > MAX_XLSX_XML:
            # A zip bomb, or a sheet too big to read here: either way the remedy is a form
            # that is read as it streams.
            raise FileError(
                f"the workbook part {name} is over {_size(MAX_XLSX_XML)} unpacked, more than "
                "is read of one part; ask for the sheet as CSV, which files.csv reads row by row"
            )

    def _elements(self, name: str, keep: str) -> Iterator[ElementTree.Element]:
        """Each ``keep`` element (a ``row``, an ``si``) of part ``name`` as it ends, whole; the
        rest of the part is let go as it is read. A part parsed whole held an object for each
        of its elements: a sheet of 120 KB zipped, sixty million bytes of empty cells, ran a
        run's process out of memory, each time at another place."""
        self._checked(name)
        tag = f"{{{_NS['m']}}}{keep}"
        cell = f"{{{_NS['m']}}}c"
        open_elements: list[ElementTree.Element] = []
        cells = 0
        with self.zip.open(name) as stream:
            for event, element in ElementTree.iterparse(stream, events=("start", "end")):
                if event == "start":
                    open_elements.append(element)
                    if element.tag == tag:
                        cells = 0
                    continue
                open_elements.pop()
                inside = any(e.tag == tag for e in open_elements)
                if inside:
                    if element.tag == cell:
                        cells += 1
                        if cells > MAX_XLSX_COLUMNS:
                            raise FileError(
                                f"a row of {name} has more than {MAX_XLSX_COLUMNS:,} cells, past "
                                "the last column, XFD"
                            )
                    continue  # part of the kept element, which ends later
                if element.tag == tag:
                    yield element
                element.clear()
                if open_elements:
                    open_elements[-1].remove(element)

    def _shared_strings(self) -> list[str]:
        try:
            found = self._elements("xl/sharedStrings.xml", "si")
            return ["".join(t.text or "" for t in si.iter(f"{{{_NS['m']}}}t")) for si in found]
        except KeyError:
            return []

    def _date_styles(self) -> set[int]:
        try:
            root = self._xml("xl/styles.xml")
        except KeyError:
            return set()
        custom = {
            int(f.get("numFmtId", "0")): f.get("formatCode", "")
            for f in root.findall("m:numFmts/m:numFmt", _NS)
        }
        dates = set()
        for index, xf in enumerate(root.findall("m:cellXfs/m:xf", _NS)):
            fmt = int(xf.get("numFmtId", "0"))
            code = custom.get(fmt, "")
            if fmt in _DATE_FORMAT_IDS or (
                code and _DATE_CODE.search(re.sub(r"\[[^]]*]", "", code))
            ):
                dates.add(index)
        return dates

    def rows(self, sheet: Any) -> Iterator[list[Any]]:
        if not self.sheets:
            raise FileError("the workbook has no sheets")
        if sheet is None:
            path = self.sheets[0][1]
        else:
            found = [p for name, p in self.sheets if name == sheet]
            if not found:
                names = ", ".join(repr(n) for n, _ in self.sheets)
                raise FileError(f"no sheet {sheet!r}; the sheets are {names}")
            path = found[0]
        try:
            self._checked(path)
        except KeyError:
            raise FileError(f"the workbook lists a sheet part {path} it does not hold") from None
        expected = 1
        for row in self._elements(path, "row"):
            number = int(row.get("r", expected))
            if number > MAX_XLSX_ROWS:
                raise FileError(f"row {number:,} is past the last row, {MAX_XLSX_ROWS:,}")
            while expected < number:  # rows the file leaves out are empty
                expected += 1
                yield []
            expected = number + 1
            cells: list[Any] = []
            for cell in row.iterfind("m:c", _NS):
                match = _CELL_REF.match(cell.get("r", ""))
                column = _column(match.group(1)) if match else len(cells)
                if column >= MAX_XLSX_COLUMNS:
                    raise FileError(f"cell {cell.get('r')} is past the last column, XFD")
                while len(cells) < column:
                    cells.append(None)
                cells.append(self._value(cell))
            yield cells

    def _value(self, cell: ElementTree.Element) -> Any:
        kind = cell.get("t", "n")
        value = cell.find("m:v", _NS)
        text = value.text if value is not None else None
        if kind == "inlineStr":
            return "".join(t.text or "" for t in cell.iter(f"{{{_NS['m']}}}t"))
        if text is None:
            return None
        if kind == "s":
            index = int(text)
            return self.strings[index] if 0 <= index < len(self.strings) else None
        if kind == "b":
            return text == "1"
        if kind in ("str", "e"):
            return text
        if kind == "d":
            return text
        number = float(text)
        style = int(cell.get("s", "0"))
        if style in self.date_styles:
            moment = _EPOCH + timedelta(days=number)
            if moment.time() == datetime.min.time():
                return moment.date().isoformat()
            return moment.isoformat(timespec="seconds")
        return int(number) if number.is_integer() and abs(number) < 2**53 else number


def _column(letters: str) -> int:
    index = 0
    for ch in letters:
        index = index * 26 + (ord(ch) - 64)
    return index - 1


def warm_up() -> None:
    """Exercise the decoders so nothing they need loads after lockdown."""
    infos = [FileInfo(id="w.csv", mime="text/csv", size=8)]
    files = Files(
        infos, Limits(), lambda _i, offset, length: b"a,b\n1,2\n"[offset : offset + length]
    )
    handle = files.open("csv", "w.csv", {})
    files.next(handle)
    list(_jsonl("w", iter(['{"a": 1}'])))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.xml", "<a><b>1</b></a>")
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as z:
        ElementTree.fromstring(z.read("x.xml"))
    _EPOCH + timedelta(days=1.5)
    datetime(2020, 1, 1).isoformat(timespec="seconds")
    for encoding in ("utf-16", "utf-16-le", "utf-16-be"):  # what text_encoding may name
        codecs.getincrementaldecoder(encoding)
