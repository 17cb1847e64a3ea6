"""The wire protocol between a runner and a confined sandbox process, versions 1 to 3.

JSON lines over the process's stdin/stdout, UTF-8, one object per line, each line an
envelope ``{"<kind>": ...}``. Both sides bound the length of a line they read and reject
anything that does not parse into the expected shape (:class:`ProtocolError`).

Process -> runner: ``ready`` or ``unconfined`` first; then any number of ``read``; then ``ran``.
Runner -> process: one ``script``; then one answer (``bytes`` + raw bytes, or ``missing``)
per ``read``.

Version 2 (live steps, :data:`LIVE_VERSION`): the script's recorded calls settle when its job
queue is next empty (see ``sandbox.runtime``), and after a ``ran`` with outcome ``calls`` the
process does not exit. It reads one line (bounded by :func:`results_bound`):

- ``{"results": [Record, ...]}``: the records of exactly the calls of that ``ran``, in call
  order (the process re-checks their count, names and arguments; anything else is a protocol
  error that ends it). The same run goes on where it stopped: more ``read``, then ``ran``
  again. Printed text and shown files accumulate over the run's segments exactly as in one
  replayed run; ``calls``, ``results``, ``arguments`` and ``file_bytes`` count over the whole
  run; ``compute_ms`` (the CPU timer) and ``step_arguments`` start again with each segment;
  ``memory`` holds for the process.
- ``{"end": {}}``, or the end of its input: the process exits (code 0) without a ``ran``.

After its last ``ran`` (finished or failed) a version 2 process waits for the end of its
input, then exits: the runner reads what the run cost from ``/proc`` while it is still there,
then ends it.

A version 1 script runs as before: recorded calls settle as they are made, and the process
exits after ``ran``. A runner that takes only version 1 gets replay steps.

Version 3 (:data:`COMPUTE_LEFT_VERSION`) adds ``limits.compute_left_ms``: what is left of the
script's ``total_compute_ms``, the CPU the process may use from the script on, over every
segment of its run (replayed or live). Each segment's CPU timer is armed for the lesser of
``compute_ms`` and what is left of it, so a script's runs together stop at their total, not a
segment past it. A runner that takes versions up to 2 gets the step as version 2, without it
(:func:`fit`).

This module is imported by the sandbox before lockdown and by the runner, so it stays
import-light: pydantic, orjson and the standard library only.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import orjson
import pydantic_core
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from sandbox import jsontext

VERSION = 3
OLDEST = 1
# The first version whose process waits, alive, for the results of the calls it stopped on.
LIVE_VERSION = 2
# The first version whose limits carry `compute_left_ms`.
COMPUTE_LEFT_VERSION = 3
LANGUAGES = ("javascript", "python")
# The one tool a model calls; a script never calls it, even when a host lists it.
RUN_CODE = "run_code"

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# Limits travel to the sandbox as JSON numbers; past 2**53 a JSON reader may round them.
MAX_LIMIT = 2**53 - 1
# The largest `compute_ms`: the CPU timer's seconds must fit the platform's time_t (about
# 24.8 days of CPU, far past PROCESS_CPU_SECONDS, which ends a process first).
MAX_COMPUTE_MS = 2**31 - 1

# Bounds on a single line. A script line carries the whole call log, so it is large; the
# runner builds it, and the sandbox still refuses one past this bound instead of buffering.
MAX_SCRIPT_LINE = 512 * MiB
# Lines from the sandbox other than `ran` are tiny.
MAX_SMALL_LINE = 64 * KiB
# `ran` carries the new calls (bounded by `step_arguments`), a bounded printed text and value.
RAN_OVERHEAD = 4 * MiB
# The most CPU one sandbox process may use over its life (RLIMIT_CPU's hard limit), however
# many live segments it runs; each segment has its own `compute_ms`. A backstop: the engine's
# `total_compute_ms` ends a script first unless a host raised it past this.
PROCESS_CPU_SECONDS = 600

# Printed text the sandbox keeps: this much of the head and this much of the tail.
PRINTED_HEAD = 64 * KiB
PRINTED_TAIL = 64 * KiB
# An error's name and message are cut to these many characters (head and tail of a message,
# the note between them included): the sandbox cuts them, and the runner holds every
# process's report to the same bounds.
ERROR_NAME_BOUND = 200
ERROR_MESSAGE_BOUND = 8 * KiB
# A returned value whose JSON is larger than this is sent cut (head and tail of its text).
VALUE_BOUND = 256 * KiB
# How deeply any data that crosses the pipe may nest (call arguments, results, the returned
# value), counting each object or array as one level. One bound for both sides, well inside
# what orjson writes (254) and reads (1,024), so no value a script or a tool controls can
# make either side's encoder fail.
MAX_DEPTH = 128
# orjson writes data nested at most this deep and refuses the next level ("Recursion limit
# reached"); `data_problem` relies on it (a test pins it).
_ORJSON_WRITE_DEPTH = 254


# The spec's limits and their defaults, the one place they are stated: sizes in bytes, times
# in milliseconds, the rest counts. Those under `Limits` below apply inside one run and go to
# the sandbox with each script; the `total_` ones, over all of a script's runs, are the
# engine's (engine/_limits.py). The README's table is checked against this by a test.
DEFAULT_LIMITS = {
    "calls": 1000,
    "results": 8 * MiB,
    "arguments": 64 * MiB,
    "call_arguments": 4 * MiB,
    "step_arguments": 8 * MiB,
    "memory": 256 * MiB,
    "compute_ms": 5000,
    "total_compute_ms": 120_000,
    "file_bytes": 64 * MiB,
    "total_file_bytes": 512 * MiB,
    "streams": 4,
    "shown_files": 4,
    "shown": 64 * KiB,
    "shown_media": 2 * MiB,
}
# The limits that are counts; the others are sizes, or times when their name ends in `_ms`.
COUNT_LIMITS = frozenset({"calls", "streams", "shown_files"})

# The floor of a process's heap (RLIMIT_DATA): Python, orjson and the script line need room
# beyond the JS heap.
MIN_PROCESS_HEAP = 512 * MiB


def process_heap(memory: int) -> int:
    """The process heap a run whose JS heap limit is ``memory`` gets unless its runner sets
    one: twice ``memory``, and at least :data:`MIN_PROCESS_HEAP` (the spec's rule)."""
    return max(2 * memory, MIN_PROCESS_HEAP)


# What a script can do about each limit: every message that says a limit was met ends with it.
REMEDIES = {
    "calls": "batch the work into fewer calls",
    "results": "ask tools for less (filter, page, select fields)",
    "arguments": "pass less",
    "call_arguments": "pass less per call (split the work)",
    "step_arguments": "await some calls before making the next",
    "memory": "work on less data at once (ask tools for less, stream files)",
    "compute_ms": "do less work per run (ask tools for less, avoid busy loops)",
    "total_compute_ms": (
        "do less work in all (ask tools for less; a replayed run repeats the work before each call)"
    ),
    "file_bytes": "read less (files.chunks from an offset, or a stream with a limit)",
    "total_file_bytes": (
        "read less (a run replayed after a pause reads its files again, as far as it goes)"
    ),
    "streams": "finish or break out of a loop before opening another",
    "shown_files": "show fewer files",
    "shown": "print the part you need instead",
    "shown_media": "show a smaller file",
}


def limit_message(name: str, detail: str, remedy: str | None = None) -> str:
    """The message for limit ``name`` met: what happened and what the script can do about it
    (``remedy``, else the limit's own: :data:`REMEDIES`).

    It is read by the model, which cannot change the limits, so it says nothing of the
    configuration; the engine's log tells the host which setting raises the limit.
    """
    return f"{name} limit met: {detail}; {remedy or REMEDIES[name]}"


def cpu_spent(limits: Limits, version: int, total: bool) -> tuple[str, str]:
    """The limit a run whose CPU timer went off met, and its message: ``total_compute_ms``
    when the timer was armed for what was left of it (``total``), else ``compute_ms``, per
    segment of a run from :data:`LIVE_VERSION` on. Said by the process of a run it stopped,
    and by the runner of a process the timer ended."""
    if total:
        detail = (
            "the script's runs used all the CPU one script may use in all (this run had "
            f"{limits.compute_left_ms or 0:,} ms of it left)"
        )
        return "total_compute_ms", limit_message("total_compute_ms", detail)
    where = (
        "in one segment of its run (up to its first calls, or since the results of its last)"
        if version >= LIVE_VERSION
        else "in one run"
    )
    detail = f"the script used its {limits.compute_ms:,} ms of CPU {where}"
    return "compute_ms", limit_message("compute_ms", detail)


def calls_over(limit: int) -> str:
    """What the ``calls`` limit met says: the call that met it was asked for and refused, not
    made, so it is named as the first call past ``limit``."""
    number = limit + 1
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10)
    calls = "call" if limit == 1 else "calls"
    return (
        f"the script's {number:,}{suffix or 'th'} call is over the {limit:,} {calls} one script "
        "may make"
    )


MEDIA_PREFIXES = ("image/", "audio/", "video/")
MEDIA_TYPES = ("application/pdf",)


def text_encoding(head: bytes, *, at_start: bool = True) -> str:
    """The codec of a file's text, from its first bytes (``head``, two or more): UTF-16 when
    they are UTF-16's byte-order mark (Excel's "Unicode Text", Windows PowerShell's
    redirections, which read as UTF-8 were garbage with a NUL between letters), else UTF-8.
    ``utf-16`` takes the mark as its byte order; a decoder that starts past the mark
    (``at_start=False``) is told the byte order instead."""
    if not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-8"
    if at_start:
        return "utf-16"
    return "utf-16-le" if head.startswith(codecs.BOM_UTF16_LE) else "utf-16-be"


def is_media(mime: str) -> bool:
    """Whether a file of MIME type ``mime`` is shown to the model as media (an image, audio,
    video, a PDF), not as text; MIME types are compared as the RFC has them, without case
    (``IMAGE/PNG`` was shown as text)."""
    mime = mime.lower()
    return mime.startswith(MEDIA_PREFIXES) or mime in MEDIA_TYPES


def a_kind(kind: str) -> str:
    """``a 'script'``, ``an 'end'``: a message's kind with its article, for messages."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind!r}"


def size_text(n: int) -> str:
    """A byte count as people read it: ``3 MiB``, ``1.5 KiB``, ``812 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}".replace(".0 ", " ")
    return f"{n:,} byte{'' if n == 1 else 's'}"


def sizes_over(n: int, limit: int) -> tuple[str, str]:
    """``size_text`` of a count over a limit and of the limit; in bytes when the two would
    read the same ("2 KiB, over the 2 KiB")."""
    over, bound = size_text(n), size_text(limit)
    return (f"{n:,} bytes", f"{limit:,} bytes") if over == bound else (over, bound)


# Types named without an article: "is bytes", not "is a bytes".
MASS_NOUNS = frozenset({"bytes", "bytearray"})
# A name whose U is read "you" (UUID, User, Unit, Usage; not Update, Umbrella), as the
# JavaScript prelude's readYou has it: "is an UserDict", "returned an UUID" read wrong.
_READ_YOU = re.compile(r"[Uu](?:[A-Z]|ni|int|s[aeiu]|ti)")


def with_article(name: str) -> str:
    """``a set``, ``an Order``, ``a UUID``, ``a UserDict``, ``bytes``: a class's (or a JSON
    type's) name with its article, as the engine's and the sandboxes' messages name a value
    (the JavaScript prelude's withArticle has the same rule)."""
    if name in MASS_NOUNS:
        return name
    vowel = name[:1].lower() in "aeiou" and _READ_YOU.match(name) is None
    return f"{'an' if vowel else 'a'} {name}"


def data_path(path: Sequence[str | int]) -> str:
    """Where in a value a part is, for messages: ``repo``, ``items[2].name``, or ``(the top
    level)``. The engine's checks and a Python script's data checks say it alike."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif text:
            text += f".{part}"
        else:
            text = str(part)
    if len(text) > 200:
        text = f"{text[:98]}...{text[-98:]}"
    return text or "(the top level)"


class ProtocolError(Exception):
    """A line that is too long, not JSON, or not the expected message."""


def results_bound(limits: Limits) -> int:
    """The longest ``results`` line a process takes for a script with ``limits``.

    It echoes the calls (at most ``step_arguments``, escaped twice over at worst) and carries
    results; a result past what the run may still read would end the run anyway, so a line
    longer than all of ``results`` fails the same way (a replay then says which limit).
    """
    return 2 * limits.step_arguments + 2 * limits.results + RAN_OVERHEAD


def run_results_bound(limits: Limits) -> int:
    """The most the ``results`` lines of one live run come to together, as far as its limits
    say: every call's arguments and result (escaped twice over at worst, as in
    :func:`results_bound`), and a KiB a call for the rest of its record."""
    return 2 * limits.arguments + 2 * limits.results + limits.calls * KiB


# The integers orjson writes: 64-bit, signed or unsigned.
_I64, _U64 = -(1 << 63), (1 << 64) - 1


def data_problem(value: Any) -> str | None:
    """What stops ``value`` from crossing the pipe, or None when it can.

    It can when orjson writes it and it nests at most :data:`MAX_DEPTH` levels of objects and
    arrays. The depth is checked by orjson itself, at its speed: wrapped in enough lists that
    one level past ``MAX_DEPTH`` is one past what orjson writes.
    """
    kind = type(value)
    if value is None or kind is bool or kind is float or (kind is int and _I64 <= value <= _U64):
        # Nests nothing, and orjson writes it (a float that is no JSON number as null): the
        # most common value of all (`return 1`), answered without the wrapping's walk.
        return None
    outer, inner = _wrapping()
    inner.append(value)
    try:
        # Weighed alone, not with the wrapping: walking the wrapping's levels made a check
        # of a small call cost 36.7 us, not 4.7 us.
        jsontext.dumps(outer, weighing=value)
    except orjson.JSONEncodeError as e:
        if "Recursion limit" in str(e):
            return (
                f"nests deeper than {MAX_DEPTH} levels of objects and arrays, the most data "
                "may nest to cross between the sandbox and the host (MAX_DEPTH)"
            )
        return f"cannot be written as JSON ({e})"
    finally:
        inner.clear()
    return None


_wrappings = threading.local()


def _wrapping() -> tuple[list[Any], list[Any]]:
    """This thread's lists nested ``_ORJSON_WRITE_DEPTH - MAX_DEPTH`` deep, outermost and
    innermost (empty): made once, since a check makes no call back into Python."""
    made: tuple[list[Any], list[Any]] | None = getattr(_wrappings, "lists", None)
    if made is None:
        inner: list[Any] = []
        outer = inner
        for _ in range(_ORJSON_WRITE_DEPTH - MAX_DEPTH - 1):
            outer = [outer]
        made = _wrappings.lists = (outer, inner)
    return made


def _crossable(value: Any) -> Any:
    problem = data_problem(value)
    if problem is not None:
        raise ValueError(f"the data {problem}")
    return value


# JSON data that crosses the pipe: refused, naming the problem, when it cannot.
_Data = Annotated[Any, AfterValidator(_crossable)]


def well_formed(text: str) -> str:
    """``text`` with each lone surrogate replaced (by ``?``): UTF-8 cannot carry them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Limits(_Model):
    """The limits that apply inside one run, under the spec's names, with its defaults.

    Sizes are bytes, times milliseconds, the rest counts.
    """

    calls: int = Field(default=DEFAULT_LIMITS["calls"], ge=0, le=MAX_LIMIT)
    results: int = Field(default=DEFAULT_LIMITS["results"], ge=0, le=MAX_LIMIT)
    arguments: int = Field(default=DEFAULT_LIMITS["arguments"], ge=0, le=MAX_LIMIT)
    call_arguments: int = Field(default=DEFAULT_LIMITS["call_arguments"], ge=0, le=MAX_LIMIT)
    step_arguments: int = Field(default=DEFAULT_LIMITS["step_arguments"], ge=0, le=MAX_LIMIT)
    memory: int = Field(default=DEFAULT_LIMITS["memory"], ge=1 * MiB, le=MAX_LIMIT)
    compute_ms: int = Field(default=DEFAULT_LIMITS["compute_ms"], ge=1, le=MAX_COMPUTE_MS)
    file_bytes: int = Field(default=DEFAULT_LIMITS["file_bytes"], ge=0, le=MAX_LIMIT)
    streams: int = Field(default=DEFAULT_LIMITS["streams"], ge=0, le=MAX_LIMIT)
    shown_files: int = Field(default=DEFAULT_LIMITS["shown_files"], ge=0, le=MAX_LIMIT)
    shown: int = Field(default=DEFAULT_LIMITS["shown"], ge=0, le=MAX_LIMIT)
    shown_media: int = Field(default=DEFAULT_LIMITS["shown_media"], ge=0, le=MAX_LIMIT)
    # Not one of the spec's limits but what is left of one: the engine's `total_compute_ms`
    # less what the script's runs used before this process (None: nothing beyond compute_ms).
    compute_left_ms: int | None = Field(default=None, ge=1, le=MAX_LIMIT)

    def met_by_a_run(self) -> frozenset[str]:
        """The limits a run under these can meet: each of the spec's here, and
        ``total_compute_ms`` when what is left of it is set."""
        return _TOTAL_MET if self.compute_left_ms is not None else _RUN_MET

    def segment_ms(self, used_ms: float = 0.0) -> int:
        """The CPU a segment may use once the run has used ``used_ms`` (from its script on):
        ``compute_ms``, or what is left of ``total_compute_ms`` when that is less (at least
        1 ms: a timer of 0 would not fire)."""
        if self.compute_left_ms is None:
            return self.compute_ms
        return min(self.compute_ms, max(1, int(self.compute_left_ms - used_ms)))


_RUN_MET = frozenset(Limits.model_fields) - {"compute_left_ms"}
_TOTAL_MET = _RUN_MET | {"total_compute_ms"}


class Ready(_Model):
    version: int
    oldest: int
    languages: list[str]


class Unconfined(_Model):
    error: str


class Record(_Model):
    """One answered call in the log: a result (JSON data) or an error message, not both."""

    name: str
    arguments: Annotated[dict[str, Any], AfterValidator(_crossable)]
    result: _Data = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


class FileInfo(_Model):
    id: str
    mime: str
    size: int = Field(ge=0)
    skill: str | None = None


# The last millisecond of the year 9999: the latest time both languages' dates take (Python's
# datetime ends there; a JavaScript Date, later). Past it, a Python script's clock failed with
# an OverflowError, and a JavaScript Date was NaN.
MAX_NOW_MS = 253_402_300_799_999


class Clock(_Model):
    now_ms: int = Field(ge=0, le=MAX_NOW_MS)
    seed: int = Field(ge=0, lt=1 << 64)


class Script(_Model):
    version: int = VERSION
    # Named in the logs of every runner it crosses: short, and no control character (a line
    # break in it forged log lines on a runner service).
    id: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")
    language: Literal["javascript", "python"] = "javascript"
    # A script's lone surrogates cannot cross the pipe, nor enter the JS engine.
    code: Annotated[str, AfterValidator(well_formed)]
    records: list[Record] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    files: list[FileInfo] = Field(default_factory=list)
    clock: Clock
    limits: Limits = Field(default_factory=Limits)

    @model_validator(mode="after")
    def _limits_of_version(self) -> Script:
        if self.limits.compute_left_ms is not None and self.version < COMPUTE_LEFT_VERSION:
            raise ValueError(
                f"limits.compute_left_ms needs script version {COMPUTE_LEFT_VERSION} or later, "
                f"not {self.version}"
            )
        return self


class ReadRequest(_Model):
    file: str
    offset: int = Field(ge=0)
    len: int = Field(ge=0)


class ErrorLine(_Model):
    line: int
    text: str


class ScriptError(_Model):
    name: str
    message: str
    lines: list[ErrorLine] = Field(default_factory=list)


class LimitMet(_Model):
    name: str
    message: str


class Call(_Model):
    name: str
    arguments: Annotated[dict[str, Any], AfterValidator(_crossable)]


class Stats(_Model):
    cpu_ms: float = 0.0
    heap_bytes: int = 0
    results_bytes: int = 0
    file_bytes: int = 0


class Ran(_Model):
    """How one run ended.

    ``value`` is present (in ``model_fields_set``) only when the script returned something
    other than ``undefined``. When the value is too large to send (its JSON over
    :data:`VALUE_BOUND`), ``value_text`` holds the text the model would see for it: a string
    as itself, cut in the middle past VALUE_BOUND characters (JavaScript's UTF-16 units),
    anything else as JSON cut in the middle; ``value_bytes`` its size.
    """

    outcome: Literal["finished", "failed", "calls"]
    value: _Data = None
    value_text: str | None = None
    value_bytes: int = 0
    error: ScriptError | None = None
    limit: LimitMet | None = None
    calls: list[Call] = Field(default_factory=list)
    printed: str = ""
    printed_bytes: int = 0
    shown: list[str] = Field(default_factory=list)
    stats: Stats = Field(default_factory=Stats)

    @model_validator(mode="after")
    def _shape(self) -> Ran:
        if self.outcome == "failed" and self.error is None:
            raise ValueError("a failed run must carry an error")
        if self.outcome == "calls" and not self.calls:
            raise ValueError("a run that stopped on calls must name at least one call")
        return self

    @property
    def returned(self) -> bool:
        """True when the script returned a value (not ``undefined``)."""
        return "value" in self.model_fields_set or self.value_text is not None


_KINDS: dict[str, type[_Model]] = {
    "ready": Ready,
    "unconfined": Unconfined,
    "script": Script,
    "read": ReadRequest,
    "ran": Ran,
}
_NAMES = {cls: kind for kind, cls in _KINDS.items()}


def canonical_json(value: Any) -> bytes:
    """The canonical JSON of plain data: sorted keys, no spaces, UTF-8.

    Call identity in the replay log compares arguments by this form. Heavy data in the
    sandbox process is written by the standard library, to the same bytes (see jsontext).
    """
    return jsontext.dumps(value, sort_keys=True)


def encode(message: _Model) -> bytes:
    """One protocol line, newline included."""
    kind = _NAMES[type(message)]
    body = message.model_dump(mode="python", exclude_unset=True)
    if isinstance(message, Script):
        # The process checks these; a default left off the line would be the reader's own.
        body["version"] = message.version
        body["language"] = message.language
    if isinstance(message, Ran) and "value" in message.model_fields_set:
        body["value"] = message.value
    if isinstance(message, Ran):  # carries the calls and value of a script: see jsontext
        return jsontext.dumps({kind: body}) + b"\n"
    return orjson.dumps({kind: body}) + b"\n"


def envelope(line: bytes) -> tuple[str, Any]:
    """Split a line into its kind and body. Raises :class:`ProtocolError` if it is none."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        if "depth limit" in str(e):  # orjson reads 1,024 levels; no message may hold 128 more
            raise ProtocolError(
                f"a line whose data nests deeper than {MAX_DEPTH} levels of objects and arrays, "
                f"the most data may nest (MAX_DEPTH): {_preview(line)}"
            ) from None
        raise ProtocolError(f"a line that is not JSON ({e}): {_preview(line)}") from None
    if not isinstance(data, dict) or len(data) != 1:
        raise ProtocolError(f"a line that is not a one-key message envelope: {_preview(line)}")
    ((kind, body),) = data.items()
    return kind, body


class _ScriptLine(_Model):
    script: Script


class _End(_Model):
    pass


class _ResumeLine(_Model):
    results: list[Record] | None = None
    end: _End | None = None

    @model_validator(mode="after")
    def _one(self) -> _ResumeLine:
        if (self.results is None) == (self.end is None):
            raise ValueError("a line after `ran` is either results or end")
        return self


END_LINE = b'{"end":{}}\n'


def results_line(records: Sequence[Record]) -> bytes:
    """The line that resumes a live process with ``records``, newline included."""
    # Built by hand, not by model_dump: a long script's every call passes here (5x faster).
    body = [
        {"name": r.name, "arguments": r.arguments, "result": r.result}
        if r.error is None
        else {"name": r.name, "arguments": r.arguments, "error": r.error}
        for r in records
    ]
    return orjson.dumps({"results": body}) + b"\n"


def _line_data(line: bytes) -> Any:
    """The data of a line that carries records (a script's, a results line: megabytes), by
    pydantic-core's JSON reader, which builds the Python objects straight from the text.
    orjson reserves twelve times the size of a document before it parses it, and a model's
    own ``model_validate_json`` builds a tree of its own first: of a result of 300,000 small
    numbers, a process held 9 MiB more to read it so, 2 MiB this way, and a live step of a
    Python script under ``memory`` = 16 MiB met the limit reading it (it reads 400,000 now).

    Raises :class:`ProtocolError`."""
    try:
        return pydantic_core.from_json(line)
    except ValueError as e:
        if "recursion limit" in str(e):
            raise ProtocolError(
                f"a line whose data nests deeper than {MAX_DEPTH} levels of objects and "
                f"arrays, the most data may nest (MAX_DEPTH): {_preview(line)}"
            ) from None
        raise ProtocolError(f"a line that is not JSON ({e}): {_preview(line)}") from None


def decode_resume(line: bytes) -> list[Record] | None:
    """The records of a ``results`` line, or ``None`` for ``end``.

    Raises :class:`ProtocolError` for anything else. Read as a script line is
    (:func:`_line_data`): results can be megabytes.
    """
    data = _line_data(line)
    try:
        message = _ResumeLine.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "line"
        raise ProtocolError(
            f"a line that is neither results nor end ({where}: {first['msg']}): {_preview(line)}"
        ) from None
    return message.results


def _decode_script(line: bytes) -> Script:
    """A script line: the whole call log (up to `arguments` and `results`, tens of MiB), read
    by :func:`_line_data`."""
    data = _line_data(line)
    try:
        return _ScriptLine.model_validate(data).script
    except ValidationError as e:
        first = e.errors()[0]
        loc = [str(p) for p in first["loc"]]
        if loc[:1] == ["script"] and len(loc) > 1:
            where = ".".join(loc[1:])
            raise ProtocolError(f"a malformed 'script' message: {where}: {first['msg']}") from None
        if loc == ["script"] and first["type"] == "value_error":  # a rule across its fields
            raise ProtocolError(f"a malformed 'script' message: {first['ctx']['error']}") from None
        others = [str(x["loc"][0]) for x in e.errors() if x["type"] == "extra_forbidden"]
        if len(others) == 1 and loc == ["script"] and first["type"] == "missing":
            raise ProtocolError(f"{a_kind(others[0])} message where script was expected") from None
        raise ProtocolError(
            f"a line that is not a one-key message envelope: {_preview(line)}"
        ) from None


def decode(line: bytes, expect: tuple[str, ...]) -> Any:
    """Parse one line into the message it holds, which must be one of ``expect`` kinds.

    Raises :class:`ProtocolError` naming what was wrong.
    """
    if expect == ("script",):
        return _decode_script(line)
    kind, body = envelope(line)
    if kind not in expect:
        raise ProtocolError(f"{a_kind(kind)} message where {' or '.join(expect)} was expected")
    try:
        return _KINDS[kind].model_validate(body)
    except ValidationError as e:
        raise ProtocolError(malformed(kind, e)) from None


def malformed(kind: str, error: ValidationError) -> str:
    """What is wrong with a ``kind`` message that did not validate: its first problem."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or kind
    return f"a malformed {kind!r} message: {where}: {first['msg']}"


def _preview(line: bytes, n: int = 120) -> str:
    text = line[:n].decode("utf-8", "replace")
    return repr(text) + ("..." if len(line) > n else "")


def unfit(
    script: Script,
    oldest: int = OLDEST,
    version: int = VERSION,
    languages: Sequence[str] = LANGUAGES,
) -> str | None:
    """Why a runner that takes script versions ``oldest`` to ``version`` in ``languages``
    cannot run ``script``, or ``None`` when it admits it. Every side that admits a step (the
    process, the runner, the runner service and its client) decides by this one rule."""
    if not oldest <= script.version <= version:
        return (
            f"it takes script versions {oldest} to {version}, the step is version {script.version}"
        )
    if script.language not in languages:
        return f"it runs {', '.join(languages)}, not {script.language}"
    return None


def fit(script: Script, version: int) -> Script:
    """``script`` as a runner that takes versions up to ``version`` reads it: a version 3
    script becomes version 2 without ``compute_left_ms`` (its runs then pass their total by
    up to a segment's ``compute_ms``, as before version 3). Anything else is ``script``
    itself, for :func:`unfit` to judge."""
    if script.version >= COMPUTE_LEFT_VERSION and LIVE_VERSION <= version < COMPUTE_LEFT_VERSION:
        # Made anew, not copied: a copy would still send the field, as null.
        kept = script.limits.model_dump(exclude_unset=True, exclude={"compute_left_ms"})
        return script.model_copy(update={"version": version, "limits": Limits(**kept)})
    return script


def ready(languages: Sequence[str] = LANGUAGES) -> Ready:
    return Ready(version=VERSION, oldest=OLDEST, languages=list(languages))
