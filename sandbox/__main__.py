"""The confined process: ``python -s -P -m sandbox [--memory-ceiling B] [--data-limit B]``.

Order matters. Everything a run needs is imported and warmed up first (after lockdown no file
can be opened, so nothing may load lazily); then the process locks itself down; then it says
``ready``, reads one script, lowers its limits to the script's, runs it, writes ``ran`` and
exits. A version 2 run that stopped on calls waits instead for their results and goes on
(``sandbox.protocol``), until it ends or is told to. A process that cannot lock itself down
says ``unconfined`` and never reads a script.

``python -s -P -m sandbox --zygote --control FD`` is the fork server instead (see
``sandbox.zygote``): it warms up once and forks one child per step, and each child does the
same per-process work as this module's :func:`serve`.

Start it with no environment but ``PYTHONHASHSEED=0`` (runner._base.SANDBOX_ENV: string
hashing the same in every process, so replays of a Python script agree) and only
stdin/stdout/stderr open (the fork server: and its control socket): lockdown closes any other
fd, but a variable's text would stay in the process's memory.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Literal, NoReturn

import orjson

from sandbox import files, jsontext, lockdown, pages, protocol, replay, runtime

# The process heap holds, besides what the script's limits allow, the script line it reads
# and the call log parsed from it: at most this many bytes per byte of the line (a string
# of ASCII with one astral character is four bytes a character in Python). The default heap
# (twice memory, at least 512 MiB) has room for a line of LINE_IN_HEAP bytes; a longer line
# gets room of its own, unless the runner capped the heap (`data_limit`, records included).
LINE_ROOM_FACTOR = 4
LINE_IN_HEAP = 16 * protocol.MiB

EXIT_UNCONFINED = 3
EXIT_PROTOCOL = 4
EXIT_INTERNAL = 70


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


class _ProcessChannel:
    """Ends a run by writing ``ran`` and exiting at once: the script cannot catch it.

    ``linger`` (version 2): after the last ``ran`` the process waits for the end of its input
    before it exits, so the runner can read what the run cost from ``/proc`` the moment
    ``ran`` arrives, without waiting for ``wait4`` (it ends the process then).
    """

    def __init__(self, linger: bool = False) -> None:
        self.linger = linger

    def end(self, ran: protocol.Ran) -> NoReturn:
        _write(protocol.encode(ran))
        if self.linger:
            with contextlib.suppress(OSError):
                while os.read(0, 65536):
                    pass
        os._exit(0)


def _warm_up() -> None:
    """Exercise every code path a run takes, so nothing loads lazily after lockdown."""
    with runtime.warming_up():
        _warm_up_runs()
    global _BASE_DATA
    _BASE_DATA = _vm_data()


def _warm_up_runs() -> None:
    script = protocol.Script(
        id="warm-up",
        code="console.log('x', {a: [1]}); const r = await tools.t({a: 1});"
        "try { null.x } catch (e) { } return r",
        records=[protocol.Record(name="t", arguments={"a": 1}, result={"ok": [1.5, "x"]})],
        tools=["t"],
        clock=protocol.Clock(now_ms=0, seed=1),
    )
    protocol.decode(protocol.encode(script), ("script",))
    ran = runtime.run_in_process(script)
    protocol.decode(protocol.encode(ran), ("ran",))
    # A live run: stop on a call, resume with its record; both version 2 lines and refusals.
    live = runtime.LiveInProcess(
        script.model_copy(update={"records": [], "version": protocol.LIVE_VERSION})
    )
    stopped = live.start()
    protocol.decode(protocol.encode(stopped), ("ran",))
    line = protocol.results_line(script.records)
    records = protocol.decode_resume(line)
    assert records is not None
    with contextlib.suppress(runtime.ResumeError):
        live.resume([])
    live.resume(records)
    protocol.decode_resume(protocol.END_LINE)
    for bad in (b"[]", b"{", b'{"results":{}}', b'{"end":{},"results":[]}'):
        with contextlib.suppress(protocol.ProtocolError):
            protocol.decode_resume(bad)
    for message in (protocol.ready(), protocol.ReadRequest(file="f", offset=0, len=1)):
        protocol.decode(protocol.encode(message), ("ready", "read"))
    failed = protocol.Ran(outcome="failed", error=protocol.ScriptError(name="E", message="m"))
    protocol.decode(protocol.encode(failed), ("ran",))
    for bad in (b"[]", b"{", b'{"ran":{}}', b'{"script":{"id":1}}'):  # each way a line is refused
        with contextlib.suppress(protocol.ProtocolError):
            protocol.decode(bad, ("script",))
    files.warm_up()
    jsontext.warm_up()
    data = b"a,b\n1,2\n"
    with_files = protocol.Script(
        id="warm-up-files",
        code="files.list(); files.stat('w.csv'); await files.text('w.csv'); files.show('w.csv');"
        "for await (const r of files.csv('w.csv')) {}"
        "for await (const l of files.lines('w.csv')) {}"
        "try { files.stat('nope') } catch (e) {}",
        files=[protocol.FileInfo(id="w.csv", mime="text/csv", size=len(data))],
        clock=protocol.Clock(now_ms=0, seed=1),
    )
    runtime.run_in_process(with_files, lambda _f, offset, length: data[offset : offset + length])
    if "python" in _LANGUAGES:
        _warm_up_python(data)


def _warm_up_python(data: bytes) -> None:
    """The same for Python scripts: every allowed module used once, replayed and live."""
    from sandbox import python  # imported here: a JavaScript-only process never loads it

    records = [
        protocol.Record(name="t", arguments={"a": 1}, result={"ok": [1.5, "x"]}),
        protocol.Record(name="t", arguments={"a": 2}, error="no"),
    ]
    script = protocol.Script(
        id="warm-up-python",
        language="python",
        code=python.warm_up_code(),
        records=records,
        tools=["t"],
        files=[protocol.FileInfo(id="w.csv", mime="text/csv", size=len(data))],
        clock=protocol.Clock(now_ms=0, seed=1),
    )
    protocol.decode(protocol.encode(script), ("script",))
    fetch = lambda _f, offset, length: data[offset : offset + length]  # noqa: E731
    live = runtime.LiveInProcess(
        script.model_copy(update={"records": [], "version": protocol.LIVE_VERSION}), fetch
    )
    ran = live.start()
    while ran.outcome == "calls":
        ran = live.resume(records[live.known : live.known + len(ran.calls)])
    # A version 1 replay, and each way a script fails early.
    small = ("r = await tools.t(a=1)\nreturn r", "return (", "x = ().__class__", "import os")
    for code in small:
        runtime.run_in_process(script.model_copy(update={"code": code, "files": []}))


def _vm_data() -> int | None:
    """This process's heap as RLIMIT_DATA counts it (VmData), or None if it cannot tell."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# The heap a warmed-up process holds before it reads a script: a Python script's `memory`
# limit is counted on top of it (set in the process and in the fork server, whose children
# start with the same heap).
_BASE_DATA: int | None = None
# What a Python run holds besides its script's heap: the line it read, parsed (see
# LINE_ROOM_FACTOR), and this much for the run's own objects and the ending it writes.
PYTHON_RUN_ROOM = 32 * protocol.MiB


def _python_data_limit(memory: int, line_bytes: int, data_limit: int | None) -> int | None:
    """RLIMIT_DATA for a Python script: its ``memory`` over the warmed-up heap, so that a
    script that allocates past it gets MemoryError (a ``memory`` limit). None when the base
    is unknown: the process heap then bounds the script, as for JavaScript."""
    if _BASE_DATA is None:
        return data_limit
    limit = _BASE_DATA + PYTHON_RUN_ROOM + LINE_ROOM_FACTOR * line_bytes + memory
    return limit if data_limit is None else min(limit, data_limit)


# The languages this process runs: all of them, unless `--languages` names fewer (the one a
# single-step process needs), which it then warms up alone and lists in `ready`.
_LANGUAGES: tuple[str, ...] = protocol.LANGUAGES

# The fork server compiles the prelude once, before it forks: every child starts with it.
_PREPARED: runtime.Prepared | None = None
# A second one, which a forked child runs a trivial script on while it waits in the pool (see
# `_touch_pages`): the run's Python code and objects are written once off the step's clock.
_PREPARED_TOUCH: runtime.Prepared | None = None
# A script line of our own, which a forked child decodes but never runs (see
# `_touch_pages`); made by the fork server too.
_TOUCH_LINE = b""


def _warm_up_zygote() -> None:
    global _PREPARED, _PREPARED_TOUCH, _TOUCH_LINE
    _warm_up()
    _PREPARED = runtime.Prepared()
    _PREPARED_TOUCH = runtime.Prepared()
    # A line as an engine's step sends it: every limit given, tools named, a clock of a
    # real one's size, the newest version. Reading it goes through the code a step's line
    # does (each field's decoding), so that code is mapped in while a pool child waits, not
    # on its step's clock: with a bare line (defaults left off), a trivial step's process
    # took 17 page faults and 136 to 184 us to read its script; so, 9 and 95 to 124 us.
    _TOUCH_LINE = protocol.encode(
        protocol.Script(
            id="0" * 32,
            code="return 1",
            tools=["t", "skill", "tool_search"],
            files=[],
            clock=protocol.Clock(now_ms=1_800_000_000_000, seed=(1 << 62) + 1),
            limits=protocol.Limits(
                **{**protocol.Limits().model_dump(), "compute_left_ms": 120_000}
            ),
            version=protocol.VERSION,
        )
    )
    # Each language's probe run (see probe_pages): a hundred calls at once, then one more
    # after their results, a line printed, a value returned. Many calls at once, because the
    # pages a step writes are not only its own objects': glibc's free lists lie across the
    # fork server's heap, and an allocation that walks them writes each chunk where it lies.
    # Probed with one call, a child still wrote about 230 and 265 pages it had not copied in
    # the two segments of a `Promise.all` of 100 calls; probed so (and learned again once the
    # loop has run, see zygote._Zygote.relearn), 45 and 22, a trivial step 14 rather than 27:
    # its process used 16% less CPU, the whole run_code 2 to 8% less time (a trivial one 2 to
    # 3%), for 1.7 MiB more of each pool child's own memory (4.5 -> 6.2 MiB).
    many = 100
    probes: dict[Literal["javascript", "python"], str] = {
        "javascript": (
            f"const rs = await Promise.all(Array.from({{ length: {many} }}, "
            "(_, i) => tools.t({ a: i })));\n"
            "const r = await tools.t({ a: rs.length });\nconsole.log(r);\nreturn r"
        ),
        "python": (
            f"import asyncio\nrs = await asyncio.gather(*[tools.t(a=i) for i in range({many})])\n"
            "r = await tools.t(a=len(rs))\nprint(r)\nreturn r"
        ),
    }
    result = {"ok": [1.5, "x"]}
    answers = protocol.results_line(
        [protocol.Record(name="t", arguments={"a": i}, result=result) for i in range(many)]
    ) + protocol.results_line([protocol.Record(name="t", arguments={"a": many}, result=result)])
    for language, code in probes.items():
        if language in _LANGUAGES:
            probe = protocol.Script(
                id="probe",
                language=language,
                code=code,
                tools=["t"],
                clock=protocol.Clock(now_ms=0, seed=1),
                # The wall time the zygote gives it (PROBE_SECONDS) in CPU, and an RLIMIT_CPU
                # no step's child has by default: a probe is not taken for one.
                limits=protocol.Limits(compute_ms=2000),
                version=protocol.LIVE_VERSION,
            )
            _PROBE_INPUTS[language] = protocol.encode(probe) + answers


def _touch_pages(warm: str) -> None:
    """In a forked child, before it says ``ready``: go through what a run does first (the
    limits lowered and the timer armed, changing nothing; the prepared context's objects, its
    memory count, QuickJS's parser, the line decoding, a run's setup, the ending's encoding)
    without running anything. Until then, the zygote's pages are shared with the child: its
    data is copied at the first write to each page, and its code mapped in at the first
    call. Doing that here, while the child waits in the pool, takes it off the step's clock:
    a trivial run_code 22 to 28% sooner on 2 CPUs.

    With ``warm`` Python (the runner's last step was a Python script), a trivial Python
    script is run too, in a run of its own (a Python run has no prepared state to use up):
    a pool step of ``return 1`` then took 1.6 ms of the child's CPU, not 3.3 ms. It costs
    the child about 2.4 MiB more of private memory, which a host that runs JavaScript only
    is not made to pay."""
    assert _PREPARED is not None
    lockdown.rehearse()
    _PREPARED.ctx.gc()
    _PREPARED.count_heap()
    script = script_from(_TOUCH_LINE)
    # QuickJS's parser, which the script's compile uses (a function compiled, none run).
    _PREPARED.stripper.touch()
    runtime.new_run(script, _ProcessChannel())
    if _PREPARED_TOUCH is not None:
        # A whole run, on a context of its own: the pages of the Python code and objects a
        # run goes through (the interpreter writes to each code object it runs, and to
        # every object's count) are copied here rather than during the step. The step's
        # page faults went from 94 to 41, its CPU from 1.12-1.21 to 0.87-0.92 ms, for
        # 0.5 MiB more of the child's private memory.
        ran = runtime.run_in_process(script, prepared=_PREPARED_TOUCH)
    else:
        ran = protocol.Ran(outcome="finished", value=1, stats=protocol.Stats(cpu_ms=1))
    protocol.encode(ran)  # as the ending's is: every field a run's ending sets
    if warm == "python" and "python" in _LANGUAGES:
        runtime.run_in_process(script.model_copy(update={"language": "python"}))


# The lines a probe child reads, by language (see probe_pages). Made by the fork server.
_PROBE_INPUTS: dict[str, bytes] = {}


def probe_pages(report: int, language: str) -> NoReturn:
    """In a child of the fork server, at its start and once more after its first children
    (see :mod:`sandbox.pages`): wait in the pool as a child made ready for ``language`` does,
    then run a live run of a script of ours in it (:data:`_PROBE_INPUTS`: its two segments)
    through the same code, and write the addresses of the pages the run made its own to fd
    ``report``; then exit. It runs unconfined: the script is ours and nothing from outside
    reaches it."""
    try:
        script_read, script_write = os.pipe()
        os.write(script_write, _PROBE_INPUTS[language])  # about 7 KiB: it fits in the pipe
        os.close(script_write)
        os.dup2(script_read, 0)
        os.close(script_read)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        _touch_pages(language)
        _write(protocol.encode(protocol.ready(_LANGUAGES)))
        within = pages.writable()
        # Twice: the pages the first count's own objects took are then counted as before.
        before = pages.own(within)
        before = pages.own(within)

        class _Probed(_ProcessChannel):
            def end(self, ran: protocol.Ran) -> NoReturn:
                _write(protocol.encode(ran))
                view = memoryview(pages.pack(pages.own(within) - before))
                while view:
                    view = view[os.write(report, view) :]
                os._exit(0)

        _run_one(None, _Probed)
    finally:
        os._exit(EXIT_INTERNAL)


def _line_room(line_bytes: int, data_limit: int | None) -> int:
    """Heap to add to the default for a script line of ``line_bytes``: its parsed objects."""
    if data_limit is not None:
        return 0
    return LINE_ROOM_FACTOR * max(0, line_bytes - LINE_IN_HEAP)


def _argument(argv: list[str], name: str, default: int) -> int:
    if name in argv:
        return int(argv[argv.index(name) + 1])
    return default


def unconfined(error: str) -> NoReturn:
    """Say the process could not confine itself, and exit without reading a script."""
    _write(protocol.encode(protocol.Unconfined(error=error)))
    os._exit(EXIT_UNCONFINED)


def serve(
    *,
    memory_ceiling: int,
    data_limit: int | None,
    filter_bpf: bytes | None = None,
    warm: str = protocol.LANGUAGES[0],
) -> NoReturn:
    """The per-process work on fds 0, 1 and 2; never returns (the process exits).

    Lock down (with ``filter_bpf`` when the caller built the filter already), write
    ``ready``, read one script, lower the limits to the script's, run it, write ``ran``,
    ``_exit``. ``python -m sandbox`` calls it after warming up; each child of the fork
    server calls it right after fork, on its own pipes.
    """
    try:
        try:
            # Room to read and parse any script line a runner may send (the line, then its
            # objects); `tighten` lowers it to what the line read needs.
            room = _line_room(protocol.MAX_SCRIPT_LINE, data_limit)
            lockdown.apply(
                memory=memory_ceiling,
                data_limit=data_limit,
                filter_bpf=filter_bpf,
                room=room + (protocol.MAX_SCRIPT_LINE if room else 0),
            )
        except Exception as e:
            unconfined(f"{type(e).__name__}: {e}")
        if _PREPARED is not None:  # a child of the fork server
            _touch_pages(warm)
        _write(protocol.encode(protocol.ready(_LANGUAGES)))
        _run_one(data_limit)
    except BaseException as e:  # a bug of ours: say what, then exit without a `ran`
        os.write(2, f"sandbox: {type(e).__name__}: {e}\n".encode("utf-8", "replace"))
        os._exit(EXIT_INTERNAL)


def _fetch(file_id: str, offset: int, length: int) -> bytes:
    """File bytes from the runner: a ``read`` line out, ``bytes`` + raw bytes or ``missing`` in.

    A runner that breaks this exchange ends the process: the run cannot go on without it.
    """
    _write(protocol.encode(protocol.ReadRequest(file=file_id, offset=offset, len=length)))
    stdin = sys.stdin.buffer
    line = stdin.readline(protocol.MAX_SMALL_LINE + 1)
    try:
        answer = orjson.loads(line) if line.endswith(b"\n") else None
    except orjson.JSONDecodeError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("missing"), str):
        raise files.FileError(f"{file_id} is gone: {answer['missing']}")
    size = answer.get("bytes") if isinstance(answer, dict) else None
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= length:
        os.write(2, b"sandbox: the runner answered a read with something else\n")
        os._exit(EXIT_PROTOCOL)
    data = stdin.read(size)
    if len(data) != size:
        os._exit(EXIT_PROTOCOL)
    return data


def script_from(line: bytes) -> protocol.Script:
    """The script a line read with a bound of MAX_SCRIPT_LINE + 1 holds.

    Raises :class:`protocol.ProtocolError` for anything else (a line over the bound or cut
    short, not a script, a version this sandbox does not take), or ``MemoryError``.
    """
    if not line.endswith(b"\n"):
        raise protocol.ProtocolError("the script line is over the bound or cut short")
    script: protocol.Script = protocol.decode(line, ("script",))
    why = protocol.unfit(script, languages=_LANGUAGES)
    if why is not None:
        raise protocol.ProtocolError(f"this sandbox cannot run the step: {why}")
    return script


def _run_one(
    data_limit: int | None, channel_type: type[_ProcessChannel] = _ProcessChannel
) -> NoReturn:
    # The run's CPU counts from here, as the runner's charge does: from the script sent on.
    start_cpu = runtime.cpu_ms()
    try:
        line = sys.stdin.buffer.readline(protocol.MAX_SCRIPT_LINE + 1)
        if not line:
            os._exit(0)  # the runner went away (or shrank its pool) before sending a script
        size = len(line)
        script = script_from(line)
    except protocol.ProtocolError as e:
        _end_before_run(protocol.ScriptError(name="ProtocolError", message=str(e)), None)
    except MemoryError:
        message = protocol.limit_message(
            "memory",
            "the step's call log does not fit in the sandbox process's heap (its data_limit)",
        )
        _end_before_run(
            protocol.ScriptError(name="LimitError", message=message),
            protocol.LimitMet(name="memory", message=message),
        )
    del line
    live = script.version >= protocol.LIVE_VERSION
    limits = script.limits
    python = script.language == "python"

    def heap_for(line_bytes: int) -> tuple[int | None, int]:
        """The process heap's data limit and room for a run whose lines (its script's, and
        the results lines of a live run) came to ``line_bytes``, as tighten() takes them."""
        if python:
            limit = _python_data_limit(limits.memory, line_bytes, data_limit)
            return limit, 0 if limit is not None else _line_room(line_bytes, data_limit)
        return data_limit, _line_room(line_bytes, data_limit)

    if python:
        # The script's heap is the process's, bounded close to its `memory`: heavy JSON goes
        # through the standard library (see jsontext). A JavaScript heap is QuickJS's own,
        # and the process's keeps room for orjson beside it.
        jsontext.bound_heap()
    else:
        # orjson's buffer for data (about nine times its weight for small items) must fit
        # beside QuickJS's heap: past a sixteenth of that room, the standard library writes.
        heap = data_limit or protocol.process_heap(limits.memory)
        jsontext.bound_heap(max(jsontext.LONG_TEXT, (heap - limits.memory) // 16))
    limit, room = heap_for(size)
    data = lockdown.heap_limit(limits.memory, limit, room)
    # The room a live run's results lines may need, within the process's hard limit: a
    # subverted process can take no more.
    most = protocol.run_results_bound(limits)
    live_room = lockdown.heap_limit(limits.memory, *heap_for(size + most)) - data
    stop = replay.CPU_STOP
    if python:
        from sandbox.python import FILENAME

        stop.script_file = FILENAME
    lockdown.stop_softly(stop.signalled)

    def allowance() -> int:
        """The CPU the segment that begins may use (see ``Limits.segment_ms``)."""
        ms = limits.segment_ms(runtime.cpu_ms() - start_cpu)
        stop.total, stop.pending = ms < limits.compute_ms, False
        return ms

    lockdown.tighten(
        compute_ms=allowance(),
        memory=limits.memory,
        data_limit=limit,
        room=room,
        live=live,
        live_room=live_room,
    )
    channel = channel_type(linger=live)
    # Descriptor 1 is the protocol's, written with os.write: what a script's code prints
    # outside its run (a finalizer, once the run has ended) goes nowhere.
    sys.stdout = None
    run = runtime.new_run(script, channel, _fetch, _PREPARED)
    if live:
        # A segment begins where recorded results settle, in a replay of the steps before as
        # at a live resume: each has `compute_ms` of its own, as the live run had, within
        # what is left of the script's total (`compute_left_ms`) for the whole run.
        run.on_segment = lambda: lockdown.rearm(allowance())
    stop.run = run
    ran = run.execute()
    stop.run = None  # waiting for results, or ending: no segment runs
    while live and ran.outcome == "calls":
        _write(protocol.encode(ran))
        # The results line is read, and its records held, as a replay's script line holds
        # them: outside the script's `memory` (a Python script's results counted against it
        # live, and not when replayed).
        lockdown.set_heap(None)
        records, read = _read_results(script.limits)
        size += read
        lockdown.set_heap(limits.memory, *heap_for(size))
        if records is None:
            run.end_memory(
                "the results of the script's calls do not fit in the sandbox process's heap "
                "beside it"
            )
        stop.run = run
        try:
            ran = run.resume(records)
        except runtime.ResumeError as e:
            _protocol_exit(f"the results do not answer the calls: {e}")
        stop.run = None
    channel.end(ran)


def _read_results(limits: protocol.Limits) -> tuple[list[protocol.Record] | None, int]:
    """The records of a ``results`` line, or None when they do not fit in the heap, and the
    line's length; exits at ``end``, at EOF and on anything else."""
    read = 0
    try:
        line = sys.stdin.buffer.readline(protocol.results_bound(limits) + 1)
        read = len(line)
        if not line:
            os._exit(0)  # the runner let the live run go
        if not line.endswith(b"\n"):
            _protocol_exit("the results line is over its bound or cut short")
        records = protocol.decode_resume(line)
    except protocol.ProtocolError as e:
        _protocol_exit(str(e))
    except MemoryError:
        return None, read  # the run's memory limit: the caller ends it so
    if records is None:
        os._exit(0)
    return records, read


def _protocol_exit(why: str) -> NoReturn:
    """The runner broke the protocol: say why on stderr and exit (no ``ran``)."""
    os.write(2, f"sandbox: {why}\n".encode("utf-8", "replace"))
    os._exit(EXIT_PROTOCOL)


def _end_before_run(error: protocol.ScriptError, limit: protocol.LimitMet | None) -> NoReturn:
    """Report a step that ended before its script ran, and exit."""
    _write(protocol.encode(protocol.Ran(outcome="failed", error=error, limit=limit)))
    os._exit(EXIT_PROTOCOL)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--zygote" in args:
        from sandbox import zygote

        # `serve` and `_warm_up` are looked up here, at call time, so a test stand-in that
        # replaces them on this module is what the fork server's children run.
        return zygote.main(
            args,
            serve=serve,
            warm_up=lambda: _warm_up_zygote(),
            probe=lambda report, language: probe_pages(report, language),
        )
    global _LANGUAGES
    if "--languages" in args:
        # A process for one step (exec mode) warms up only the languages it is told.
        named = args[args.index("--languages") + 1].split(",")
        _LANGUAGES = tuple(x for x in protocol.LANGUAGES if x in named)
    memory_ceiling = _argument(args, "--memory-ceiling", protocol.Limits().memory)
    data_limit = _argument(args, "--data-limit", 0) or None
    try:
        _warm_up()
    except Exception as e:
        unconfined(f"{type(e).__name__}: {e}")
    serve(memory_ceiling=memory_ceiling, data_limit=data_limit)


if __name__ == "__main__":
    sys.exit(main())
