"""The fork server: ``python -s -P -m sandbox --zygote --control FD``.

Starting a Python and importing the sandbox costs about 120 ms; forking a process that has
already done so costs a few. The zygote imports and warms up everything a run needs, builds
the seccomp filter once, learns by a probe child per language which of its pages a step
writes (each child forked ahead into a pool copies those while it waits: ``sandbox.pages``;
learned once more after its first children, see ``_Zygote.relearn``), and then forks one
child per step. Each child moves the three pipe ends it was given onto
fds 0, 1 and 2 and does the same per-process work as ``python -m sandbox`` (``serve``:
lockdown with the pre-built filter, ``ready``, one script).

It runs beside untrusted code, so it stays small and import-light, and it holds nothing a
child could want: it is started with no environment but ``PYTHONHASHSEED=0``, only its
control socket and stdio open, and it is single-threaded when it forks (``_quickjs``, not
``quickjs``).
What it gives up by design: every child has the zygote's address-space layout (as with
Android's zygote), so a child that learns its own layout learns its siblings'; none of them
holds a secret, and each is under the seccomp filter before it reads a script.

Control protocol, over a ``SOCK_SEQPACKET`` Unix socket (one JSON object per message):

runner -> zygote
    ``{"spawn": {"id": n, "memory": bytes, "data_limit": bytes | null, "nice": n, "warm":
    language, "ahead": bool}}`` with three fds in ``SCM_RIGHTS``: the child's stdin, stdout and
    stderr. The zygote forks a child that keeps only those three, and closes its own copies.
    ``nice`` (for pool children, forked ahead) lowers the child's priority until its runner
    takes it; ``warm``: the language it is made ready for; ``ahead``: it will wait for its
    script, so it copies the pages a step writes first (``sandbox.pages``).
    ``{"kill": {"pid": p}}``: SIGKILL a child it has not reaped yet (for kernels without
    pidfds; with them the runner signals the child's pidfd itself).
zygote -> runner
    ``{"hello": {"version": 1, "pid": p, "pages": {language: n}}}`` once, when warmed up;
    ``pages``: how many pages a child forked ahead for a language copies before its step.
    ``{"pages": {language: n}}`` once it tried to learn those pages again, for each language
    (``_Zygote.relearn``): the counts since.
    ``{"spawned": {"id": n, "pid": p}}`` with the child's pidfd in ``SCM_RIGHTS`` (when the
    kernel has ``pidfd_open``): a handle that always names that process, so the runner can
    signal it with no pid-reuse race, even if the zygote dies.
    ``{"failed": {"id": n, "error": "..."}}`` when it could not fork.
    ``{"exited": {"pid": p, "id": n, "status": s, "cpu_ms": x, "max_rss": bytes}}`` from
    ``wait4``, once per child. Only the zygote reaps its children, so a pid it reported stays
    that child's until it reports the exit.

When the control socket closes (the runner closed it or died), the zygote kills every child
it still has, reaps them and exits: nothing outlives the runner.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from typing import Any, NoReturn

import orjson

from sandbox import lockdown, pages, protocol

VERSION = 1
# Control messages are small; a spawn request is well under 1 KiB.
MAX_MESSAGE = 64 * 1024
EXIT_CHILD_BUG = 70
# How long a probe child (see sandbox.pages) may take to run its step: fifty times what it
# needs (20 to 40 ms), and short, as the fork server says hello only after its probes: one
# that hangs holds the start back 2 s a language. Past it, it is killed and teaches nothing.
PROBE_SECONDS = 2.0
# After how many children forked ahead the zygote learns a language's pages again, once (see
# _Zygote.relearn): its loop's first rounds change its heap, then it holds still.
RELEARN_AFTER = 2
# How long that probe may take: the spawns wait for it, so less than PROBE_SECONDS, yet
# fifty times what it needs (about 20 ms), for a loaded machine. Past it, it is killed, and
# what the start learned stands.
RELEARN_SECONDS = 1.0


class _Zygote:
    def __init__(
        self,
        control: socket.socket,
        serve: Callable[..., NoReturn],
        filter_bpf: bytes | None,
        problem: str | None,
        hot: dict[str, list[pages.Span]] | None = None,
        probe: Callable[[int, str], NoReturn] | None = None,
    ) -> None:
        self.control = control
        self.hot = hot or {}  # by language, the pages a step writes (see sandbox.pages)
        self.probe = probe
        self.forked_ahead = 0
        self.relearned: set[str] = set()
        self.serve = serve
        self.filter_bpf = filter_bpf
        self.problem = problem
        self.children: dict[int, int] = {}  # pid -> spawn id, until reaped
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    # ---- messages ----

    def send(self, kind: str, body: dict[str, Any], fds: list[int] | None = None) -> None:
        data = orjson.dumps({kind: body})
        if fds:
            socket.send_fds(self.control, [data], fds)
        else:
            self.control.send(data)

    # ---- the loop ----

    def run(self) -> int:
        # SIGCHLD must have a handler (not SIG_IGN, which would auto-reap and lose the
        # status) for the wakeup fd to see it; the handler itself does nothing.
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        try:
            self.send("hello", {"version": VERSION, "pid": os.getpid(), "pages": self.copied()})
            poller = select.poll()
            poller.register(self.control.fileno(), select.POLLIN)
            poller.register(self.wake_r, select.POLLIN)
            while True:
                for fd, _events in poller.poll():
                    if fd == self.wake_r:
                        self._drain_wakeups()
                    elif not self._handle_control():
                        return 0
                self._reap()
        except OSError:  # the runner is gone (EPIPE, ECONNRESET)
            return 0
        finally:
            self._shutdown()

    def copied(self) -> dict[str, int]:
        """How many pages a child forked ahead copies before its step, by language."""
        return {
            language: sum(n for _, n in spans) // pages.PAGE for language, spans in self.hot.items()
        }

    def relearn(self, language: str) -> None:
        """Learn again which pages a step in ``language`` writes, once, when a child is to be
        forked ahead for it and ``RELEARN_AFTER`` children (of any language) were forked ahead
        before; tell the runner how many pages a child copies now (the same as before when
        the probe taught nothing).

        The start-up probe saw the heap as the zygote left it before its loop, and the loop's
        first rounds change it (its first receives, sends and forks): glibc's free lists at
        a later fork are not the ones the probe walked. Learned at the start only, a child
        still wrote about 210 pages it had not copied in the second segment of a
        ``Promise.all`` of 100 calls, and 90 in the first, a page fault each; learned again,
        22 and 45, and so still 150 steps later. It holds this spawn back for the probe's
        run (about 20 ms, once; ``RELEARN_SECONDS`` at most). A probe that fails keeps what the
        start learned."""
        if self.probe is None or self.problem is not None or language in self.relearned:
            return
        if self.forked_ahead < RELEARN_AFTER:
            return
        self.relearned.add(language)
        spans = _learn_pages(self.probe, language, RELEARN_SECONDS)
        if spans:
            self.hot[language] = spans
        self.send("pages", self.copied())

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 512):
                pass

    def _handle_control(self) -> bool:
        """Handle one message; False when the control socket closed."""
        data, fds, flags, _ = socket.recv_fds(self.control, MAX_MESSAGE, 3)
        if not data and not fds:
            return False
        try:
            if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
                raise ValueError("a truncated control message")
            message = orjson.loads(data)
            ((kind, body),) = message.items()
            if kind == "spawn":
                owned, fds = fds, []
                self._spawn(body, owned)
            elif kind == "kill":
                self._kill(int(body["pid"]))
            else:
                raise ValueError(f"an unknown control message {kind!r}")
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            # The runner is trusted, but a malformed message must not end the zygote.
            self.send("failed", {"id": None, "error": f"bad control message: {e}"})
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def _spawn(self, body: dict[str, Any], fds: list[int]) -> None:
        """Fork a child on ``fds``; this closes the zygote's copies of them in every case."""
        spawn_id = body.get("id") if isinstance(body, dict) else None
        try:
            spawn_id = int(body["id"])
            if len(fds) != 3:
                raise ValueError(f"a spawn request carries 3 fds, this one {len(fds)}")
            memory = int(body["memory"])
            data_limit = None if body.get("data_limit") is None else int(body["data_limit"])
            nice = int(body.get("nice") or 0)
            ahead = bool(body.get("ahead"))
            warm = body.get("warm", protocol.LANGUAGES[0])
            if warm not in protocol.LANGUAGES:
                raise ValueError(f"warm must be one of {', '.join(protocol.LANGUAGES)}")
            if ahead:
                self.relearn(warm)
            pid = os.fork()
        except (OSError, ValueError, TypeError, KeyError) as e:
            for fd in fds:
                os.close(fd)
            self.send("failed", {"id": spawn_id, "error": f"{type(e).__name__}: {e}"})
            return
        if pid == 0:
            self._child(fds, memory, data_limit, nice, warm, ahead)
        for fd in fds:
            os.close(fd)
        self.children[pid] = spawn_id
        if ahead:
            self.forked_ahead += 1
        pidfd = None
        with contextlib.suppress(OSError, AttributeError):
            pidfd = os.pidfd_open(pid)
        try:
            self.send("spawned", {"id": spawn_id, "pid": pid}, [pidfd] if pidfd else None)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _child(
        self,
        fds: list[int],
        memory: int,
        data_limit: int | None,
        nice: int,
        warm: str,
        ahead: bool,
    ) -> NoReturn:
        """In the new child: keep only its own pipes as 0/1/2, then serve one script (its
        pages touched for a run in ``warm``, the language the runner expects next)."""
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            # The control socket, the wakeup pipe and the fds just moved; lockdown closes
            # anything left too, but nothing of the zygote's should reach serve().
            os.closerange(3, 1 << 20)
            if self.problem is not None:
                os.write(1, protocol.encode(protocol.Unconfined(error=self.problem)))
                os._exit(3)
            if nice > 0:
                os.nice(nice)
            if ahead:
                # While it waits, the pages a step in the language it is made ready for
                # writes: not a page fault at a time in the step. (A child forked for a step
                # at once would copy them on the step's clock, more than the step writes:
                # 0.45 ms more for `return 1` in fork mode.)
                pages.populate(self.hot.get(warm, []))
            self.serve(
                memory_ceiling=memory,
                data_limit=data_limit,
                filter_bpf=self.filter_bpf,
                warm=warm,
            )
        finally:
            os._exit(EXIT_CHILD_BUG)

    def _kill(self, pid: int) -> None:
        if pid in self.children:  # not reaped, so the pid is still this child's
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            spawn_id = self.children.pop(pid, None)
            self.send(
                "exited",
                {
                    "pid": pid,
                    "id": spawn_id,
                    "status": status,
                    "cpu_ms": round((usage.ru_utime + usage.ru_stime) * 1000, 3),
                    "max_rss": usage.ru_maxrss * 1024,
                },
            )

    def _shutdown(self) -> None:
        """Kill every child still alive and reap them all, so none outlives the zygote."""
        for pid in list(self.children):
            self._kill(pid)
        while self.children:
            try:
                pid, _, _ = os.wait4(-1, 0)
            except ChildProcessError:
                break
            self.children.pop(pid, None)


def main(
    argv: list[str],
    *,
    serve: Callable[..., NoReturn],
    warm_up: Callable[[], None],
    probe: Callable[[int, str], NoReturn] | None = None,
) -> int:
    """Run the fork server on the control socket named by ``--control FD``. ``probe`` (in a
    child, given a pipe to report on and a language) learns the pages a step in that language
    writes (see ``sandbox.pages``)."""
    control_fd = int(argv[argv.index("--control") + 1])
    control = socket.socket(fileno=control_fd)
    control.setblocking(True)
    # Forking ahead is background work, and its children inherit the policy.
    lockdown.batch_scheduling()
    problem: str | None = None
    filter_bpf: bytes | None = None
    try:
        warm_up()
        lockdown.prepare()
        filter_bpf = lockdown.export_bpf()
    except Exception as e:
        # Every child will say `unconfined` with this, as `python -m sandbox` would.
        problem = f"{type(e).__name__}: {e}"
    # Children share the zygote's pages copy-on-write; a collection in a child that walked
    # every object would touch (and copy) them all. Frozen objects are never collected.
    gc.collect()
    gc.freeze()
    hot: dict[str, list[pages.Span]] = {}
    if probe is not None and problem is None:
        for language in protocol.LANGUAGES:
            hot[language] = _learn_pages(probe, language)
    return _Zygote(control, serve, filter_bpf, problem, hot, probe).run()


def _learn_pages(
    probe: Callable[[int, str], NoReturn], language: str, seconds: float | None = None
) -> list[pages.Span]:
    """The spans of the fork server's pages that a child's step in ``language`` writes, by a
    probe child (see ``sandbox.pages``); ``[]`` when it cannot tell (no ``/proc``, no fork, a
    probe that failed, took longer than ``seconds`` (PROBE_SECONDS by default) or wrote more
    than a report can hold)."""
    within = pages.writable()
    if not within:
        return []
    try:
        report_read, report_write = os.pipe2(os.O_CLOEXEC)
    except OSError:
        return []
    try:
        pid = os.fork()
    except OSError:
        os.close(report_read)
        os.close(report_write)
        return []
    if pid == 0:
        try:
            # The zygote's loop's signal set-up is not the probe's (its wakeup pipe is closed
            # below), and its report pipe only: the control socket stays the zygote's alone.
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.closerange(3, report_write)
            os.closerange(report_write + 1, 1 << 20)
            probe(report_write, language)
        finally:
            os._exit(EXIT_CHILD_BUG)
    os.close(report_write)
    most = sum(size for _, size in within) // pages.PAGE * 8  # an address per page at most
    data = bytearray()
    reported = False
    try:
        poller = select.poll()
        poller.register(report_read, select.POLLIN)
        deadline = time.monotonic() + (PROBE_SECONDS if seconds is None else seconds)
        while (left := deadline - time.monotonic()) > 0 and poller.poll(left * 1000):
            chunk = os.read(report_read, 65536)
            if not chunk:
                reported = True
                break
            data += chunk
            if len(data) > most:
                break
    except OSError:
        reported = False  # the report could not be read
    finally:
        os.close(report_read)
        if not reported:
            os.kill(pid, signal.SIGKILL)  # too slow, or not a report: it tells us nothing
        _, status = os.waitpid(pid, 0)
    if not reported or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return []
    return pages.spans_of(pages.unpack(bytes(data)), within)
