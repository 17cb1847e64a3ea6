"""The replay core every script language binds to: records, divergence, limits, printed
output, files, the stop that cannot be caught, and how a run reports itself (``ran``).

The replay rules live here: a call that matches its record settles, a call past the log is
collected and does not settle in this run, a call that differs from its record ends the run
with a divergence error. Limits that apply inside one run are counted here too.

When a recorded call settles depends on the script's version. Version 1: at once, as the
call is made. Version 2 (:data:`~sandbox.protocol.LIVE_VERSION`): when the script's queue of
ready work is next empty, all the recorded calls made since then together, in call order, as
a live process settles the calls of a step when their results arrive. So a run replayed from
the log and a live run that stopped at each step and was resumed (:meth:`Replay.resume`) make
the same calls in the same order and print the same text: the two agree byte for byte.

A run ends early (divergence, a budget limit) through ``Channel.end``, which in the real
process writes ``ran`` and exits at once, so no ``try`` in the script can swallow it.

A language binds to :class:`Replay` by subclassing it: it runs the script (``_execute``),
drives its pending work to an empty queue (``_drive``, settling recorded calls through
``_settle_recorded`` and its ``settle`` function), turns the script's end into a ``Ran``
(``_concluded``) and says how much heap it holds (``heap_bytes``). Calls, files and printed
text come to the core as strings: a call's arguments and a file operation's as JSON text,
made by the language from data it checked; answers go back as tagged strings (see
:meth:`Replay._call`). sandbox/runtime.py binds JavaScript, sandbox/python.py Python.
"""

from __future__ import annotations

import abc
import gc
import keyword
import os
import re
import resource
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from types import FrameType
from typing import Any, ClassVar, NoReturn, Protocol

import orjson

from sandbox import jsontext
from sandbox.files import Fetch, FileError, FileLimit, FileLimitError, Files, RawJson
from sandbox.names import closest_names
from sandbox.protocol import (
    LIVE_VERSION,
    MAX_DEPTH,
    PRINTED_HEAD,
    PRINTED_TAIL,
    RUN_CODE,
    VALUE_BOUND,
    Call,
    ErrorLine,
    LimitMet,
    Limits,
    Ran,
    Record,
    Script,
    ScriptError,
    Stats,
    calls_over,
    canonical_json,
    cpu_spent,
    data_problem,
    limit_message,
    size_text,
    sizes_over,
)

# A `\uD800`-`\uDFFF` escape in JSON text (not itself an escaped backslash). JSON.stringify
# escapes only lone surrogates, which orjson refuses; they become U+FFFD, as in printed text.
_LONE_SURROGATE = re.compile(r"(?<!\\)((?:\\\\)*)\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class Channel(Protocol):
    """Where a run's ending goes. ``end`` does not return in the real process."""

    def end(self, ran: Ran) -> None: ...


class _Ended(BaseException):
    """Raised on the Python side only, after ``Channel.end`` returned (in-process use).

    A BaseException, so that a Python script's ``except Exception`` does not catch it."""


class ResumeError(Exception):
    """Records that are not those a stopped run waits for, or a run that waits for none."""


_size = size_text


@dataclass
class _Printed:
    """Printed text, bounded: the head and the tail are kept, the total is counted."""

    head: list[str] = field(default_factory=list)
    head_len: int = 0
    # A deque: the oldest piece goes at nearly every write once the head is full, and from
    # a list that cost the tail's length in pieces (one character printed at a time: 28 us
    # a write, 300,000 writes 8.5 s).
    tail: deque[str] = field(default_factory=deque)
    tail_len: int = 0
    total_bytes: int = 0
    cut: bool = False

    def add(self, text: str) -> None:
        """One line (console.log): ``text`` and a newline."""
        self.write(text + "\n")

    def write(self, text: str) -> None:
        """Text as it is, newlines included (Python's print adds its own ``end``)."""
        if not text:
            return
        self.total_bytes += len(text.encode("utf-8", "replace"))
        room = PRINTED_HEAD - self.head_len
        if room > 0:
            self.head.append(text[:room])
            self.head_len += min(room, len(text))
            text = text[room:]
            if not text:
                return
        self.cut = True
        self.tail.append(text[-PRINTED_TAIL:])
        self.tail_len += min(len(text), PRINTED_TAIL)
        while self.tail_len - len(self.tail[0]) >= PRINTED_TAIL:
            self.tail_len -= len(self.tail.popleft())

    def text(self) -> str:
        head = "".join(self.head)
        if not self.cut:
            return head
        tail = "".join(self.tail)[-PRINTED_TAIL:]
        shown = len(head.encode()) + len(tail.encode())
        if shown >= self.total_bytes:  # past the head, but within the tail: nothing cut
            return head + tail
        note = f"\n[... {_size(self.total_bytes - shown)} of printed output cut ...]\n"
        return head + note + tail


class Replay(abc.ABC):
    """One run of one script, whatever its language. Create, then call :meth:`execute` once.

    A language subclasses it; see the module docstring for what it provides.
    """

    # The steering inputs a divergence message names, and the message of a run that waits
    # on something that can never complete: in the language's own words.
    STEERING: ClassVar[str] = "the clock and random numbers"
    STUCK: ClassVar[str] = (
        "the script is waiting on something that can never complete: it has not returned, "
        "it awaits no tool call, and nothing is left to run"
    )

    def __init__(self, script: Script, channel: Channel, fetch: Fetch | None = None) -> None:
        self.script = script
        self.limits: Limits = script.limits
        self.files = Files(script.files, script.limits, fetch or _no_fetch, script.language)
        self.channel = channel
        # A copy: a live run adds the records it is resumed with.
        self.records: list[Record] = list(script.records)
        self.position = 0
        # Version 2: recorded calls settle when the queue of ready work is next empty, and a
        # run that stopped on calls can be resumed. ``deferred`` holds the positions of the
        # calls made since the queue was last empty (recorded or new), in call order.
        self.deferring = script.version >= LIVE_VERSION
        self.deferred: list[int] = []
        # The language's settle(json): answers ([1, result] or [0, error]) in call order.
        self.settle: Any = None
        # Called as each batch of recorded calls settles (version 2), before the script sees
        # them: a segment of the run begins there, replayed or live (the process re-arms its
        # CPU allowance, so `compute_ms` holds per segment however the run got there).
        self.on_segment: Callable[[], None] | None = None
        self.resumable = False  # stopped on calls that ``resume`` may answer
        self.new_calls: list[Call] = []
        self.step_arg_bytes = 0
        self.arg_bytes = 0
        self.results_bytes = 0
        self.limit_errors: dict[str, str] = {}  # per-call limit messages thrown at a call site
        # A limit the call being made met: (name, message), until its binding ends the run at
        # the script's line (see _limit_here).
        self.limit_met: tuple[str, str] | None = None
        # The call being made differs from its record: the error its binding ends the run
        # with at the script's line (see _diverged_here).
        self.diverged: ScriptError | None = None
        # A JavaScript number holds integers exactly up to 2^53: a result past that is read
        # rounded, which a warning says once (see _check_exact).
        self._exact_checked = script.language == "python"
        self.printed = _Printed()
        self.outcome: tuple[str, Any] | None = None
        self.ended = False
        self.script_lines = source_lines(script.code, script.language)
        # run_code is never callable from a script, even when a host lists it.
        self.tool_names = [name for name in script.tools if name != RUN_CODE]
        self._cpu0 = cpu_ms()

    def tool_hint(self, name: str, arguments: str) -> str:
        """What the error for an undefined ``name`` goes on to say when it stands for one of
        the script's tools (a model writes ``get_price(...)`` for ``tools.get_price(...)``),
        the call written with ``arguments``; else "". A name stands for a tool that it is, or
        that it is but for case and underscores (``getPrice``): nothing looser, a script's own
        misspelt variable is not a tool's."""
        bare = _bare(name)
        tool = next((t for t in self.tool_names if _bare(t) == bare), None)
        if name in self.tool_names:
            tool = name  # before another whose bare form is the same (get_user, getUser)
        if tool is None:
            return ""
        return (
            f"; the host's tool {tool} is called through `tools`: `await tools.{tool}({arguments})`"
        )

    def release(self) -> None:
        """Drop what the run holds of its language's engine, once it is over or let go. Its
        engine refers back to the run (the host functions), so without this both wait for
        the cycle collector, which frees them at some later allocation, on another's clock."""
        self.settle = None

    # ---- what a language provides ----

    def heap_bytes(self) -> int:
        """The heap the script holds now (0 when the language cannot tell)."""
        return 0

    @abc.abstractmethod
    def _execute(self) -> Ran:
        """Run the script from its start to the first empty queue (the language's)."""

    @abc.abstractmethod
    def _drive(self) -> Ran:
        """Run ready work until the queue is empty, settling recorded calls (version 2), then
        report how the run stands; :meth:`resume` calls it after adding records."""

    @abc.abstractmethod
    def _concluded(self, kind: str, payload: Any) -> Ran:
        """The run's ending for the script's own end: ``outcome`` as the language set it."""

    # ---- host functions: strings in, strings out ----

    def _print(self, text: str) -> None:
        if not self.ended and isinstance(text, str):
            self.printed.add(text)

    def _closest(self, name: str) -> str:
        return orjson.dumps(closest_names(str(name), self.tool_names)).decode()

    def _call(self, name: str, args_json: str) -> str:
        if self.ended:
            return "x"
        limits = self.limits
        index = self.position
        number = index + 1
        args_bytes = len(args_json.encode("utf-8"))
        if args_bytes > limits.call_arguments:
            size, bound = sizes_over(args_bytes, limits.call_arguments)
            message = limit_message(
                "call_arguments",
                f"the arguments of tools.{name} are {size}, over the {bound} one call may take",
            )
            self.limit_errors[message] = "call_arguments"
            return "l" + message
        try:
            arguments = _json_data(args_json)
        except _NotData as e:
            return "t" + f"the argument of tools.{name} {e}"
        if not isinstance(arguments, dict):
            # Only a script that changed Object.prototype.toJSON or the like gets here.
            return "t" + f"the arguments of tools.{name} did not turn into a JSON object"
        self.position += 1
        self.arg_bytes += args_bytes
        if self.arg_bytes > limits.arguments:
            size, bound = sizes_over(self.arg_bytes, limits.arguments)
            return self._limit_here(
                "arguments",
                f"the script's calls have passed {size} of arguments, over the {bound} one "
                "script may pass",
            )
        if index < len(self.records):
            record = self.records[index]
            if record.name != name or canonical_json(record.arguments) != canonical_json(arguments):
                return self._diverged_here(number, record, name, arguments)
            if self.deferring:
                self.deferred.append(index)
                return "d"
            if record.error is not None:
                return "e" + record.error
            result_json = jsontext.dumps(record.result)
            self.results_bytes += len(result_json)
            if self.results_bytes > limits.results:
                return self._limit_here("results", self._results_detail())
            if not self._exact_checked:
                self._check_exact(record, result_json)
            return "r" + result_json.decode()
        if number > limits.calls:
            return self._limit_here("calls", calls_over(limits.calls))
        self.step_arg_bytes += args_bytes
        if self.step_arg_bytes > limits.step_arguments:
            size, bound = sizes_over(self.step_arg_bytes, limits.step_arguments)
            return self._limit_here(
                "step_arguments",
                f"the calls this step asks for pass {size} of arguments together, over the "
                f"{bound} one step may pass",
            )
        # Not validated again: the name is the prelude's string and the arguments were just
        # checked to cross the pipe (_json_data).
        self.new_calls.append(Call.model_construct(name=name, arguments=arguments))
        if self.deferring:
            self.deferred.append(index)
            return "d"
        return "p"

    def _file(self, op: str, args_json: str) -> str:
        """``files.*``: ``r`` + JSON of the answer, or ``t`` + a message the script can catch."""
        if self.ended:
            return "x"
        files = self.files
        try:
            args = _json_data(args_json)
        except _NotData as e:
            return "t" + f"the argument of files.{op} {e}"
        if not isinstance(args, dict):
            return "t" + f"files.{op} was given arguments that are not an object"
        try:
            if op == "list":
                answer: Any = files.listing()
            elif op == "stat":
                answer = files.stat(args.get("id"))
            elif op == "text":
                answer = files.text(args.get("id"))
            elif op == "show":
                files.show(args.get("id"))
                answer = None
            elif op == "sheets":
                answer = files.sheets(args.get("id"))
            elif op == "open":
                answer = files.open(
                    str(args.get("kind")), args.get("id"), args.get("options") or {}
                )
            elif op == "next":
                items, done = files.next(int(args.get("handle", 0)))
                answer = {"items": items, "done": done}
            elif op == "close":
                files.close(int(args.get("handle", 0)))
                answer = None
            else:
                return "t" + f"files.{op} is not a function of files"
        except FileError as e:
            if isinstance(e, FileLimitError):
                self.limit_errors[str(e)] = e.name  # uncaught, the run ends on the limit
            return "t" + str(e)
        except FileLimit as e:
            self._end_limit_message(e.name, e.message)
        return "r" + _answer_json(answer)

    # ---- endings ----

    def _stats(self) -> Stats:
        try:
            heap = self.heap_bytes()
        except Exception:
            heap = 0
        return Stats(
            cpu_ms=round(cpu_ms() - self._cpu0, 3),
            heap_bytes=heap,
            results_bytes=self.results_bytes,
            file_bytes=self.files.bytes_read,
        )

    def _finish(self, ran: Ran) -> Ran:
        ran.shown = list(self.files.shown)
        ran.printed = self.printed.text()
        ran.printed_bytes = self.printed.total_bytes
        ran.stats = self._stats()
        if ran.limit is not None and ran.limit.name == "memory":
            # What is left after the failure is a few KiB; the heap reached its limit.
            ran.stats.heap_bytes = max(ran.stats.heap_bytes, self.limits.memory)
        return ran

    def _end(self, ran: Ran) -> NoReturn:
        self.ended = True
        self.channel.end(self._finish(ran))
        raise _Ended

    def end_memory(self, detail: str) -> NoReturn:
        """End the run on its ``memory`` limit, met outside the script's code: ``detail``
        says what did not fit (the results a live run was resumed with)."""
        self._end_limit("memory", detail)

    def end_cpu_spent(self, total: bool, lines: list[ErrorLine]) -> NoReturn:
        """End the run where it runs, its CPU timer gone off (see lockdown.stop_softly): on
        ``total_compute_ms`` when the timer was armed for what was left of it (``total``),
        else on ``compute_ms``, at the script's ``lines`` (innermost first, see
        :meth:`stop_lines`); what it printed and showed up to here goes with the ending, as
        with any other limit."""
        self._end_limit_message(*cpu_spent(self.limits, self.script.version, total), lines)

    def stop_lines(self, frame: FrameType | None) -> list[ErrorLine]:
        """The script's lines (innermost first) where its CPU timer stopped it, read without
        running any of its code; ``frame`` is the Python frame the stop came in. May raise
        (the heap at its limit): the stop then names none. A language that cannot say names
        none."""
        return []

    def _end_failed(self, name: str, message: str) -> NoReturn:
        self._end(Ran(outcome="failed", error=ScriptError(name=name, message=message)))

    def _end_limit(self, name: str, detail: str) -> NoReturn:
        """End the run on limit ``name``; ``detail`` says what was used (see limit_message)."""
        self._end_limit_message(name, limit_message(name, detail))

    def _end_results(self) -> NoReturn:
        self._end_limit("results", self._results_detail())

    def _results_detail(self) -> str:
        size, bound = sizes_over(self.results_bytes, self.limits.results)
        return f"the script has read {size} of results, over the {bound} one script may read"

    def _limit_here(self, name: str, detail: str) -> str:
        """The answer ``L`` to the call being made, which met limit ``name``: its binding
        ends the run at the script's line that made it (:meth:`end_at_limit`)."""
        self.limit_met = (name, limit_message(name, detail))
        return "L"

    def end_at_limit(self, lines: list[ErrorLine]) -> NoReturn:
        """End the run on the limit the last call met (see :meth:`_limit_here`), or on its
        divergence (:meth:`_diverged_here`), at the script's ``lines`` (innermost first) that
        made the call."""
        if self.diverged is not None:
            error = self.diverged.model_copy(update={"lines": lines})
            self._end(Ran(outcome="failed", error=error))
        assert self.limit_met is not None
        self._end_limit_message(*self.limit_met, lines)

    def _end_limit_message(
        self, name: str, message: str, lines: list[ErrorLine] | None = None
    ) -> NoReturn:
        self._end(
            Ran(
                outcome="failed",
                error=ScriptError(name="LimitError", message=message, lines=lines or []),
                limit=LimitMet(name=name, message=message),
            )
        )

    def _diverged_here(self, number: int, record: Record, name: str, arguments: Any) -> str:
        """The answer ``L`` to call ``number``, which differs from its ``record``: its binding
        ends the run as diverged at the script's line that made it (:meth:`end_at_limit`),
        which the model needs to find what steered it."""
        language = self.script.language
        recorded = _call_text(record.name, record.arguments, language)
        made = _call_text(name, arguments, language)
        self.diverged = self._divergence(
            f"call {number} differs from the log: the script's earlier run made {recorded}, "
            f"this run made {made}"
        )
        return "L"

    def _divergence(self, what: str, lines: list[ErrorLine] | None = None) -> ScriptError:
        """The error of a run that went another way than the log's: ``what`` it did."""
        why = (
            f"A script must make the same calls in the same order on every run; only its "
            f"calls' results, {self.STEERING} may steer it, and those are the same each run"
        )
        if not self.deferring:
            # Version 1 settles a recorded call's result as the call is made, not where the
            # earlier run had it: code that races a call against other awaits may go another
            # way then, which no script of its own steered.
            why += (
                " (this run's protocol version 1 settles a recorded call as soon as it is "
                "made: code that races a call against other awaits may go another way; "
                "version 2 settles it where the earlier run did)"
            )
        return ScriptError(name="DivergenceError", message=f"{what}. {why}", lines=lines or [])

    def _memory_message(self) -> str:
        return limit_message("memory", f"the script's heap passed {_size(self.limits.memory)}")

    # ---- the run ----

    def execute(self) -> Ran:
        """Run the script from the start to an empty job queue and report how it ended."""
        return self._within_memory(self._execute)

    def _within_memory(self, go: Callable[[], Ran]) -> Ran:
        # A MemoryError the language let out of the script is the memory limit.
        try:
            return go()
        except MemoryError:
            self._end_limit_message("memory", self._memory_message())

    def _settle_recorded(self) -> bool:
        """Settle the deferred calls that have records, in call order; False if none has.

        They are a prefix of ``deferred``: records are a prefix of the calls. Results count
        against ``results`` as they settle, so the limit ends the run at the same record
        whether the run is replayed or live.
        """
        known = len(self.records)
        count = 0
        while count < len(self.deferred) and self.deferred[count] < known:
            count += 1
        if count == 0:
            return False
        if self.on_segment is not None:
            self.on_segment()
        limits = self.limits
        parts = []
        for position in self.deferred[:count]:
            record = self.records[position]
            if record.error is not None:
                parts.append(jsontext.dumps([0, record.error]))
                continue
            result_json = jsontext.dumps(record.result)
            self.results_bytes += len(result_json)
            if self.results_bytes > limits.results:
                self._end_results()
            if not self._exact_checked:
                self._check_exact(record, result_json)
            parts.append(b"[1," + result_json + b"]")
        del self.deferred[:count]
        self.settle((b"[" + b",".join(parts) + b"]").decode())
        return True

    def _check_exact(self, record: Record, result_json: bytes) -> None:
        """A warning line, once a run, when a result holds an integer past what JavaScript's
        numbers hold exactly (2^53): the script reads it rounded (an id that then names
        another user), where it read no word of it. Found by the text first (16 digits or
        more), then by the value."""
        if _LONG_INTEGER.search(result_json) is None:
            return
        big = _inexact_integer(record.result)
        if big is None:
            return
        self._exact_checked = True
        self.printed.write(
            warning_line(
                0,
                "Warning",
                f"tools.{record.name}(...) returned the integer {big}, past what JavaScript's "
                "numbers hold exactly (2^53): the script reads it rounded; have the tool "
                "return such numbers as strings",
            )
        )

    def resume_problem(self, records: list[Record]) -> str | None:
        """Why ``records`` cannot resume this run, or None: they must be exactly the calls
        it stopped on (count, names and arguments, in call order)."""
        if not self.resumable:
            return "the run is not waiting for results (it ended, or it is version 1)"
        calls = self.new_calls
        if len(records) != len(calls):
            return f"the run waits for {len(calls):,} results, it was sent {len(records):,}"
        for i, (record, call) in enumerate(zip(records, calls, strict=True)):
            if record.name != call.name or canonical_json(record.arguments) != canonical_json(
                call.arguments
            ):
                number = len(self.records) + i + 1
                return (
                    f"result {i + 1} is for {_call_text(record.name, record.arguments)}, but call "
                    f"{number:,} was {_call_text(call.name, call.arguments)}"
                )
        return None

    def resume(self, records: list[Record]) -> Ran:
        """Go on with a run that stopped on calls, given their ``records`` (version 2).

        The same run continues where it stopped: the calls settle in call order, and the
        run goes to the next empty job queue, as :meth:`execute` does. The CPU figure and
        ``step_arguments`` start again; everything else (printed text, shown files, results,
        arguments and file bytes) goes on counting over the whole run. Raises
        :class:`ResumeError` (the run is left as it was) when ``records`` are not exactly
        the calls it waits for.
        """
        problem = self.resume_problem(records)
        if problem is not None:
            raise ResumeError(problem)
        self.resumable = False
        self.records.extend(records)
        self.new_calls = []
        self.step_arg_bytes = 0
        self._cpu0 = cpu_ms()
        return self._within_memory(self._drive)

    def _conclude(self) -> Ran:
        if self.new_calls:
            # Every call a script makes is made, even one it no longer awaits.
            self.resumable = self.deferring
            return self._finish(Ran(outcome="calls", calls=list(self.new_calls)))
        returned = self.outcome is not None and self.outcome[0] == "value"
        if self.position < len(self.records) and (returned or self.outcome is None):
            # The log's later calls ran on the host for an earlier run that went on past
            # here: a run that returns (or waits on nothing) without them would report the
            # script done, their effects left out. A run the script's own error or a limit
            # ends is a failure either way, told as it is.
            return self._finish(Ran(outcome="failed", error=self._missing_call(returned)))
        if self.outcome is None:
            return self._finish(
                Ran(
                    outcome="failed",
                    error=ScriptError(
                        name="StuckError", message=self.STUCK, lines=self._stuck_lines()
                    ),
                )
            )
        return self._concluded(*self.outcome)

    def _missing_call(self, returned: bool) -> ScriptError:
        """The divergence of a run that returned (``returned``), or waits on nothing it can
        complete, before making all the log's calls; the latter at the lines it waits at."""
        record = self.records[self.position]
        recorded = _call_text(record.name, record.arguments, self.script.language)
        how = "returned" if returned else "stopped, waiting on nothing it could complete,"
        made = f"{self.position:,} call" + ("" if self.position == 1 else "s")
        return self._divergence(
            f"call {self.position + 1} is missing: the script's earlier run made {recorded}, "
            f"this run {how} after {made} of the log's {len(self.records):,}",
            None if returned else self._stuck_lines(),
        )

    def _stuck_lines(self) -> list[ErrorLine]:
        """Where a stuck script waits, innermost first, when the language can tell."""
        return []


def _finished(payload: str) -> Ran:
    if payload == "u":
        return Ran(outcome="finished")
    if payload[0] == "c":  # a string too long to send whole: its head, tail and length
        head, tail, length = _json_data(payload[1:])
        # Each language keeps VALUE_BOUND // 2 of its own units at each end (JavaScript's
        # UTF-16 units, as .length counts, Python's code points) and gives the length in
        # them. The head and tail counted in code points here made a JavaScript string of
        # astral characters (two units each) say a cut that was neither.
        left_out = int(length) - 2 * (VALUE_BOUND // 2)
        cut = f"\n[... {left_out:,} characters of the returned string cut ...]\n"
        return Ran(outcome="finished", value_text=head + cut + tail, value_bytes=int(length))
    json_text = payload[1:]
    size = len(json_text.encode("utf-8"))
    if size <= VALUE_BOUND:
        return Ran(outcome="finished", value=_json_data(json_text))
    if json_text.startswith('"'):
        # A string of at most VALUE_BOUND characters (a longer one came as "c"), past it in
        # bytes of JSON (escaped newlines and quotes, or characters of several bytes): sent
        # as itself, as a longer one is; cut as JSON, a CSV of 240,000 characters reached the
        # model as one line of \n.
        return Ran(outcome="finished", value_text=_json_data(json_text), value_bytes=size)
    half = VALUE_BOUND // 2
    cut = f"\n[... {_size(size - 2 * half)} of the returned value cut ...]\n"
    return Ran(
        outcome="finished",
        value_text=json_text[:half] + cut + json_text[-half:],
        value_bytes=size,
    )


def _bare(name: str) -> str:
    return name.replace("_", "").lower()


class CpuStop:
    """Ends a run where it runs when its segment's CPU timer goes off (the SIGPROF handler
    lockdown.stop_softly sets), so that its ``ran`` says what it printed up to there (and
    the files it showed), live or replayed alike (a process the timer ended said nothing,
    and what it printed since its last calls was lost).

    The handler runs between two bytecodes of whatever Python code runs then. Where that is
    the script's own code (a Python script's file), or library code the script called with
    none of the sandbox's own between (``difflib``, ``pprint``), it ends the run at once;
    elsewhere (the sandbox's own code, in the middle of its work) the stop is ``pending``:
    :meth:`poll` ends the run at the next point it is called at (QuickJS's interrupt poll,
    see sandbox/runtime.py, or the next line of a Python script's own, traced from then on),
    and the timer calls the handler again each millisecond. Between segments (``run``
    None) a timer that goes off does nothing: the next segment arms its own.
    """

    def __init__(self) -> None:
        self.run: Replay | None = None
        self.script_file: str | None = None
        self.total = False  # the timer is armed for what is left of total_compute_ms
        self.pending = False
        # The stop's ending is under way: the timer, and QuickJS's interrupt poll, may come
        # again while it reads the script's lines, and must not end the run in it again.
        self.ending = False

    def signalled(self, signum: int, frame: FrameType | None) -> None:
        run = self.run
        if run is None or run.ended or self.ending:
            return
        # A script at its recursion bound (recursing in an `except RecursionError:`) would
        # leave the ending no frames: it gets some while the handler runs.
        bound = sys.getrecursionlimit()
        sys.setrecursionlimit(bound + _ENDING_FRAMES)
        try:
            if self._in_script(frame):
                self._end(run, frame)
            if not self.pending and self.script_file is not None:
                self._trace_script(frame)
            self.pending = True
        finally:
            sys.setrecursionlimit(bound)

    def _trace_script(self, frame: FrameType | None) -> None:
        """Have the next line of the Python script's own code end the run: a script that
        prints on is in the sandbox's code most of the time, where the handler, called
        again each millisecond, lands as often as not (its output lost to the hard stop)."""

        def line(frame: FrameType, event: str, arg: object) -> Any:
            if not self.pending:  # a new segment began: no more tracing
                sys.settrace(None)
                return None
            self.poll(frame)
            return line

        def call(frame: FrameType, event: str, arg: object) -> Any:
            return line(frame, event, arg) if frame.f_code.co_filename == self.script_file else None

        while frame is not None:
            if frame.f_code.co_filename == self.script_file:
                frame.f_trace = line
            frame = frame.f_back
        sys.settrace(call)

    def _in_script(self, frame: FrameType | None) -> bool:
        """Whether ``frame`` runs for the script with none of the sandbox's code under it
        before the script's own (a script busy in a library's Python code: its run ended by
        the hard stop, output lost)."""
        while frame is not None:
            name = frame.f_code.co_filename
            if name == self.script_file:
                return True
            if name.startswith(_SANDBOX_DIR):
                return False
            frame = frame.f_back
        return False

    def poll(self, frame: FrameType | None = None) -> None:
        """A point where the run may end: end it if a stop is pending (``frame``: the
        script's Python frame there, if any)."""
        run = self.run
        if self.pending and not self.ending and run is not None and not run.ended:
            self._end(run, frame)

    def _end(self, run: Replay, frame: FrameType | None) -> NoReturn:
        # The ending allocates, and a collection then would call the script's __del__
        # methods, whose loop no stop could end any more (the run has ended): the process
        # ends with it, so it collects nothing more.
        gc.disable()
        self.ending = True
        try:
            try:
                lines = run.stop_lines(frame)
            except Exception:  # no lines rather than no ending
                lines = []
            run.end_cpu_spent(self.total, lines)
        finally:
            self.ending = False


# The process's: it runs one script.
CPU_STOP = CpuStop()
# Frames a stop's ending may take past the script's recursion bound.
_ENDING_FRAMES = 100
# Where the sandbox's own modules are, as their code objects name them.
_SANDBOX_DIR = os.path.dirname(__file__) + os.sep


class _NotData(Exception):
    """JSON from the script that cannot cross the pipe; the message says why."""


def _json_data(text: str) -> Any:
    """Parse JSON made by JSON.stringify into data that can cross the pipe, or raise _NotData.

    Lone surrogates (which orjson refuses) become U+FFFD, as in printed text; data nested
    deeper than MAX_DEPTH is refused, naming the bound.
    """
    try:
        try:
            value = jsontext.loads(text)
        except orjson.JSONDecodeError:
            value = jsontext.loads(_LONE_SURROGATE.sub(r"\1\\ufffd", text))
    except orjson.JSONDecodeError as e:
        if "depth limit" in str(e):
            raise _NotData(
                f"nests deeper than {MAX_DEPTH} levels of objects and arrays, the most data may "
                "nest to cross between the sandbox and the host (MAX_DEPTH)"
            ) from None
        raise _NotData(f"is not JSON data ({e})") from None
    problem = data_problem(value)
    if problem is not None:
        raise _NotData(problem)
    return value


def _cut(text: str, bound: int) -> str:
    """``text`` within ``bound`` characters, its note included (so that no later bound of the
    same size cuts it again and counts only its own cut)."""
    if len(text) <= bound:
        return text
    half = (bound - 48) // 2  # the note is at most 48 characters
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut ...]\n{text[-half:]}"


# A warning about a failure shows the first line of its message, cut at this many characters.
_FAILURE_BOUND = 300


# An integer of 16 digits or more in JSON text, not inside a word or a number's fraction: a
# candidate past 2^53 (9007199254740992), confirmed by the value (a string's digits match too).
_LONG_INTEGER = re.compile(rb"(?<![\w.\"])-?\d{16,}(?![\d.eE])")
_EXACT = 2**53


def _inexact_integer(value: Any) -> int | None:
    """The first integer in ``value`` (JSON data) past 2^53 either way, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is int and not -_EXACT <= item <= _EXACT:
            return int(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(reversed(item))
    return None


def warning_line(line: int, category: str, message: str) -> str:
    """A warning as a run prints it, as CPython does but with the script's line (0: none):
    ``line 3: RuntimeWarning: message`` and a newline."""
    where = f"line {line}: " if line else ""
    return f"{where}{category}: {message}\n"


# What ends a line of a script, as its language counts lines (the numbers in its errors):
# JavaScript's line terminators, and Python's universal newlines.
_LINE_BREAKS = {
    "javascript": re.compile("\r\n|[\r\n\u2028\u2029]"),
    "python": re.compile("\r\n|[\r\n]"),
}


def source_lines(code: str, language: str) -> list[str]:
    """``code``'s lines as ``language`` numbers them (TypeScript's as JavaScript's): a lone
    CR ends a line in both, U+2028 and U+2029 in JavaScript."""
    return _LINE_BREAKS.get(language, _LINE_BREAKS["javascript"]).split(code)


def unawaited(shown: str, message: str) -> str:
    """What a warning says of ``shown`` (``tools.x(...)``, a task), which failed with
    ``message`` and which nothing took the error of (awaited, caught) before the run ended."""
    first = message.split("\n", 1)[0]
    if len(first) > _FAILURE_BOUND or first != message:
        first = first[:_FAILURE_BOUND] + " [...]"
    return f"{shown} failed and nothing awaited it: {first}"


def assigned_ending(name: str) -> str:
    """What a warning says of a script that returned nothing and whose last statement gives
    ``name`` a value (`const summary = {...}`): the value the script made for its answer."""
    return (
        f"the script ends giving `{name}` a value, which goes nowhere: a script's result is "
        f"what it returns, so end it with `return {name}`"
    )


def never_called(name: str | None, call: str) -> str:
    """What a script is told that only defines functions and calls none, so none of its code
    ran (a model's habit: its work wrapped in ``async function main(args) {...}``, or the
    script one ``async (input) => {...}``). ``name``: the last function's, None for one
    written alone; ``call``: how the script would call it (``return await main()``)."""
    body = (
        "write its body as the script itself (a script is already the body of an async "
        "function: await works at its top level)"
    )
    if name is None:
        return (
            f"the script is a function that is never called, so none of its code ran: {body}, "
            "giving any parameters it takes their values there"
        )
    return (
        f"the script defines `{name}` and never calls it, so none of its code ran: {body}, or "
        f"end the script with `{call}`"
    )


def bare_ending(shown: str, fix: str | None = None) -> str:
    """What a warning says of a script that returned nothing and whose last statement is the
    bare expression ``shown`` (``result``, ``data.items``, ``main()``): a notebook's or a
    REPL's habit, where the last expression is the answer, or a program's; in a script its
    value goes nowhere. ``fix``: what to return, when not ``shown`` itself."""
    return (
        f"the script ends with `{shown}`, whose value goes nowhere: a script's result is what "
        f"it returns, so write `return {fix or shown}`"
    )


def _call_text(name: str, arguments: Any, language: str = "javascript") -> str:
    """The call as a script in ``language`` writes it: JavaScript's object of arguments
    (`tools.echo({"a":1})`), Python's keywords (`tools.echo(a=1)`, a Python script was shown
    JavaScript's form, `{"on":false}` for on=False), keys in canonical order."""
    if language == "python" and isinstance(arguments, dict):
        # A key that is no name is passed as **{...} (`**{"a-b": 1}`).
        named = lambda k: k.isidentifier() and not keyword.iskeyword(k)  # noqa: E731
        items = sorted(arguments.items())
        rest = {k: v for k, v in items if not named(k)}
        parts = [f"{k}={v!r}" for k, v in items if named(k)] + ([f"**{rest!r}"] if rest else [])
        text = ", ".join(parts)
    else:
        text = canonical_json(arguments).decode()
    if len(text) > 200:
        text = text[:200] + "..."
    return f"tools.{name}({text})"


def cpu_ms() -> float:
    """The CPU this process has used so far, user and system, in ms."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def _answer_json(answer: Any) -> str:
    """JSON text of a ``files`` answer, its long strings encoded by the standard library's
    encoder, which sizes its output exactly. orjson reserves about eight bytes a character
    before it writes a string, and an allocation the process's heap limit refuses is a
    SIGSEGV in it: ``files.text`` of a 32 MiB file, its bound under the default memory,
    crashed the process, as did a line that long. A long JSON line goes as it is
    (:class:`~sandbox.files.RawJson`)."""
    if isinstance(answer, str):
        return encode_basestring(answer)
    if isinstance(answer, dict) and isinstance(answer.get("items"), list):
        items = ",".join(
            str(item)
            if isinstance(item, RawJson)
            else encode_basestring(item)
            if isinstance(item, str)
            else jsontext.dumps(item).decode()
            for item in answer["items"]
        )
        return f'{{"items":[{items}],"done":{"true" if answer.get("done") else "false"}}}'
    return jsontext.dumps(answer).decode()


def _no_fetch(file_id: str, offset: int, length: int) -> bytes:
    raise FileError(f"{file_id} cannot be read: this run was given no way to read files")


# A prepared prelude starts past the last line any script can have (scripts are bounded at
# 256 KiB), so a stack frame in it is never read as a line of the script.
class _Collect:
    ran: Ran | None = None

    def end(self, ran: Ran) -> None:
        self.ran = ran
