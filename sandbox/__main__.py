"""The confined process: ``python -I -m sandbox [--memory-ceiling B] [--data-limit B]``.

Order matters. Everything a run needs is imported and warmed up first (after lockdown no file
can be opened, so nothing may load lazily); then the process locks itself down; then it says
``ready``, reads one script, lowers its limits to the script's, runs it, writes ``ran`` and
exits. A process that cannot lock itself down says ``unconfined`` and never reads a script.

Start it with an empty environment and only stdin/stdout/stderr open: lockdown closes any
other fd, but a variable's text would stay in the process's memory.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from sandbox import lockdown, protocol, runtime

EXIT_UNCONFINED = 3
EXIT_PROTOCOL = 4


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


class _ProcessChannel:
    """Ends a run by writing ``ran`` and exiting at once: the script cannot catch it."""

    def end(self, ran: protocol.Ran) -> NoReturn:
        _write(protocol.encode(ran))
        os._exit(0)


def _warm_up() -> None:
    """Exercise every code path a run takes, so nothing loads lazily after lockdown."""
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
    for message in (protocol.ready(), protocol.ReadRequest(file="f", offset=0, len=1)):
        protocol.decode(protocol.encode(message), ("ready", "read"))
    failed = protocol.Ran(outcome="failed", error=protocol.ScriptError(name="E", message="m"))
    protocol.decode(protocol.encode(failed), ("ran",))
    try:
        protocol.decode(b"[]", ("script",))
    except protocol.ProtocolError:
        pass


def _argument(name: str, default: int) -> int:
    argv = sys.argv[1:]
    if name in argv:
        return int(argv[argv.index(name) + 1])
    return default


def main() -> int:
    memory_ceiling = _argument("--memory-ceiling", protocol.Limits().memory)
    data_limit = _argument("--data-limit", 0) or None
    try:
        _warm_up()
        lockdown.apply(memory=memory_ceiling, data_limit=data_limit)
    except Exception as e:
        _write(protocol.encode(protocol.Unconfined(error=f"{type(e).__name__}: {e}")))
        return EXIT_UNCONFINED
    _write(protocol.encode(protocol.ready()))

    stdin = sys.stdin.buffer
    line = stdin.readline(protocol.MAX_SCRIPT_LINE + 1)
    if not line:
        return 0  # the runner went away before sending a script
    try:
        if not line.endswith(b"\n"):
            raise protocol.ProtocolError("the script line is over the bound or cut short")
        script: protocol.Script = protocol.decode(line, ("script",))
        if not protocol.OLDEST <= script.version <= protocol.VERSION:
            raise protocol.ProtocolError(
                f"script version {script.version}; this sandbox takes "
                f"{protocol.OLDEST} to {protocol.VERSION}"
            )
    except protocol.ProtocolError as e:
        failed = protocol.Ran(
            outcome="failed", error=protocol.ScriptError(name="ProtocolError", message=str(e))
        )
        _write(protocol.encode(failed))
        return EXIT_PROTOCOL
    del line
    lockdown.tighten(
        compute_ms=script.limits.compute_ms, memory=script.limits.memory, data_limit=data_limit
    )
    channel = _ProcessChannel()
    ran = runtime.Run(script, channel).execute()
    channel.end(ran)


if __name__ == "__main__":
    sys.exit(main())
