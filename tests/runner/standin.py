"""A misbehaving sandbox, for the conformance suite's crash tests.

Run as ``python -I standin.py -I -m sandbox <the sandbox's own arguments>`` (a wrapper
script stands in for the runner's ``python``), it is ``python -m sandbox`` (exec mode) or
``python -m sandbox --zygote`` (fork server) with ``serve`` replaced: the process says
``ready`` without locking down, reads the script, and if the script's code starts with
``// standin: <behaviour>`` it misbehaves that way; any other script runs normally.

Behaviours: ``garbage`` (a line that is not JSON), ``endless`` (a line with no end),
``midline`` (dies in the middle of ``ran``), ``no_ran`` (exits 0 without ``ran``),
``segv`` (SIGSEGV), ``hang`` (sleeps without using CPU), ``wrong_kind`` (a ``ready`` where
``ran`` belongs), ``stderr_exit`` (a traceback-like stderr line, then exit 1).

Lying processes, which speak the protocol but not the truth: ``ran <json>`` (that ``ran``
body, whatever it claims), ``big_name`` (a call to a 12 MB tool name), ``big_error`` (a 16 MB
error message), ``deep_value`` / ``deep_arguments`` (data nested 300 deep),
``read_flood`` (asks for the first file's bytes forever, whatever the answers),
``read_slow`` (asks for one byte at a time, 40 times, then hangs), ``read_empty`` (asks for
the bytes past the end of the first file, forever), ``read_deaf`` (asks for 4 MiB, then
never reads its stdin).

Hostile while a live step waits: ``live_spin``, ``live_alloc`` and ``live_garbage`` first lock
down exactly as the sandbox does (seccomp, rlimits, the script's CPU timer), write a ``ran``
that stops on one call to ``t``, and then, instead of waiting for its results, spin, allocate
until the heap limit stops them, or write garbage lines to stdout.

Self-contained on purpose: under ``-I`` the tests package is not importable.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, NoReturn

import orjson

import sandbox.__main__ as sandbox_main
from sandbox import lockdown, protocol, runtime

MARK = "// standin: "


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _ran(body: dict[str, Any] | bytes) -> NoReturn:
    _write(b'{"ran": ' + (body if isinstance(body, bytes) else orjson.dumps(body)) + b"}\n")
    os._exit(0)


# Written by hand: orjson will not write data this deep, which is the point.
NESTED = b"[" * 300 + b"1" + b"]" * 300


def _read(file_id: str, offset: int, length: int) -> bytes | None:
    """One read exchange: the bytes, or ``None`` when the runner answered ``missing``."""
    _write(orjson.dumps({"read": {"file": file_id, "offset": offset, "len": length}}) + b"\n")
    answer = orjson.loads(sys.stdin.buffer.readline(protocol.MAX_SMALL_LINE))
    if "missing" in answer:
        return None
    return sys.stdin.buffer.read(answer["bytes"])


def _lie(behaviour: str, script: protocol.Script) -> NoReturn:
    if behaviour.startswith("ran "):
        _ran(orjson.loads(behaviour[4:]))
    if behaviour == "big_name":
        _ran({"outcome": "calls", "calls": [{"name": "n" * 12_000_000, "arguments": {}}]})
    if behaviour == "big_error":
        _ran({"outcome": "failed", "error": {"name": "E" * 1000, "message": "m" * 16_000_000}})
    if behaviour == "deep_value":
        _ran(b'{"outcome": "finished", "value": ' + NESTED + b"}")
    if behaviour == "deep_arguments":
        _ran(b'{"outcome": "calls", "calls": [{"name": "t", "arguments": {"a": ' + NESTED + b"}}]}")
    if behaviour == "read_flood":
        while True:
            _read(script.files[0].id, 0, 4 * protocol.MiB)
    if behaviour == "read_deaf":
        request = {"file": script.files[0].id, "offset": 0, "len": 4 * protocol.MiB}
        _write(orjson.dumps({"read": request}) + b"\n")
        time.sleep(3600)
    if behaviour == "read_empty":
        while True:
            _read(script.files[0].id, script.files[0].size, 100)
    if behaviour == "read_slow":
        for offset in range(40):
            _read(script.files[0].id, offset, 1)
        time.sleep(3600)
    _misbehave(behaviour)


def _misbehave(behaviour: str) -> NoReturn:
    if behaviour == "garbage":
        _write(b"this is not json\n")
    elif behaviour == "endless":
        chunk = b"x" * 65536
        while True:
            _write(chunk)
    elif behaviour == "midline":
        _write(b'{"ran": {"outcome": "fin')
    elif behaviour == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif behaviour == "hang":
        time.sleep(3600)
    elif behaviour == "wrong_kind":
        _write(protocol.encode(protocol.ready()))
        time.sleep(3600)
    elif behaviour == "stderr_exit":
        os.write(2, b"Traceback (most recent call last):\nstandin: deliberate failure\n")
        os._exit(1)
    os._exit(0)  # no_ran, and after the one-shot behaviours


def _hostile_while_waiting(
    behaviour: str,
    script: protocol.Script,
    *,
    memory_ceiling: int,
    data_limit: int | None,
    filter_bpf: bytes | None,
) -> NoReturn:
    lockdown.apply(memory=memory_ceiling, data_limit=data_limit, filter_bpf=filter_bpf)
    limits = script.limits
    lockdown.tighten(
        compute_ms=limits.compute_ms, memory=limits.memory, data_limit=data_limit, live=True
    )
    _write(b'{"ran": {"outcome": "calls", "calls": [{"name": "t", "arguments": {"a": 1}}]}}\n')
    if behaviour == "live_spin":
        while True:
            pass
    if behaviour == "live_alloc":
        hoard = []
        while True:  # until RLIMIT_DATA refuses (MemoryError, and the process exits)
            hoard.append(bytearray(8 * protocol.MiB))
    if behaviour == "live_garbage":
        while True:  # blocks once the pipe is full: nobody reads it while the step waits
            _write(b"garbage " * 1023 + b"\n")
    os._exit(0)


def serve(
    *,
    memory_ceiling: int,
    data_limit: int | None,
    filter_bpf: bytes | None = None,
    warm: str = protocol.LANGUAGES[0],  # the real sandbox's: a stand-in has no pages to warm
) -> NoReturn:
    _write(protocol.encode(protocol.ready()))
    line = sys.stdin.buffer.readline(protocol.MAX_SCRIPT_LINE + 1)
    if not line:
        os._exit(0)
    script = protocol.decode(line, ("script",))
    first = script.code.split("\n", 1)[0]
    if first.startswith(MARK + "live_"):
        _hostile_while_waiting(
            first[len(MARK) :].strip(),
            script,
            memory_ceiling=memory_ceiling,
            data_limit=data_limit,
            filter_bpf=filter_bpf,
        )
    if first.startswith(MARK):
        _lie(first[len(MARK) :].strip(), script)

    class Channel:
        def end(self, ran: protocol.Ran) -> NoReturn:
            _write(protocol.encode(ran))
            os._exit(0)

    channel = Channel()
    channel.end(runtime.new_run(script, channel).execute())


if __name__ == "__main__":
    args = sys.argv[1:]
    args = args[args.index("sandbox") + 1 :]  # drop "-I -m sandbox"
    sandbox_main.serve = serve  # type: ignore[assignment]
    sys.exit(sandbox_main.main(args))
