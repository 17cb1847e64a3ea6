"""A confined child for the hostile tests: the real ``sandbox.lockdown``, then one attack.

Started by ``conftest.py`` with ``env={}`` and pipes (or /dev/null) on 0/1/2, in one of two
ways::

    python -m tests.hostile.child --zygote         # forks one child per command line
    python -m tests.hostile.child --fresh ATTACK   # locks itself down and runs ATTACK

The zygote imports and warms everything, builds the BPF once and opens a few extra fds and
an environment variable that its children must not keep; then, for each line ``ATTACK`` on
stdin, it forks a child (the fork-server path: ``apply(filter_bpf=...)``), waits for it and
writes ``{"status": {"exit": n, "cpu_ms": t}}`` or ``{"status": {"signal": n, "cpu_ms": t}}``
(``cpu_ms``: the child's user + system CPU time, from wait4). A fresh process runs the
whole ``apply()``, building its own filter.

A child, once locked down, writes ``{"ready": {"pid": n}}`` and waits for one line on stdin
(so the parent can inspect ``/proc/<pid>``), then runs the attack and writes
``{"result": ...}``: ``{"ok": value}``, ``{"errno": "EACCES", ...}`` or
``{"exception": "MemoryError", ...}``. An attack may write ``{"paused": ...}`` and wait for
another line. A child that cannot lock down writes ``{"unconfined": {"step", "error"}}`` and
exits 3. A child the filter kills writes nothing more: the parent sees ``SIGSYS``.

Everything an attack uses is imported before lockdown: after it, no module can be loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import mmap
import os
import resource
import signal
import socket
import sys
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import _quickjs
import orjson
import pydantic
import pyseccomp

import sandbox.__main__ as sandbox_main
from sandbox import lockdown, protocol, python, runtime

EXIT_UNCONFINED = 3
EXIT_CRASHED = 70
MiB = 1024 * 1024

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


# --- plumbing -------------------------------------------------------------------------------


def send(message: dict[str, Any]) -> None:
    data = json.dumps(message).encode() + b"\n"
    while data:
        data = data[os.write(1, data) :]


def read_line() -> bytes:
    """One line from fd 0, a byte at a time: nothing past the newline is consumed, so the
    zygote and its child can share the pipe."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def checked(result: int) -> int:
    """A libc return value, or OSError from errno when it is -1."""
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def nr(name: str) -> int:
    """The native number of a syscall (pyseccomp asks libseccomp, which opens nothing)."""
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    if number < 0:
        raise NotImplementedError(f"no {name} syscall on this architecture")
    return number


def syscall(name: str, *args: Any) -> int:
    values = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return checked(libc.syscall(ctypes.c_long(nr(name)), *values))


@dataclass
class Ctx:
    """What an attack gets: the zygote's pid (a process it must not reach) and a pause."""

    zygote_pid: int

    def pause(self, note: dict[str, Any]) -> bytes:
        send({"paused": note})
        return read_line()


@dataclass
class Attack:
    run: Callable[[Ctx], Any]
    before: Callable[[], None] | None = None
    apply_kwargs: dict[str, Any] = field(default_factory=dict)


ATTACKS: dict[str, Attack] = {}


def attack(
    name: str, *, before: Callable[[], None] | None = None, **apply_kwargs: Any
) -> Callable[[Callable[[Ctx], Any]], Callable[[Ctx], Any]]:
    def register(fn: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
        ATTACKS[name] = Attack(fn, before, apply_kwargs)
        return fn

    return register


# --- files and paths (refused with an errno) ------------------------------------------------


@attack("open_file")
def _open_file(ctx: Ctx) -> Any:
    """Read /etc/passwd."""
    with open("/etc/passwd", "rb") as f:
        return f.read(10).decode()


@attack("create_file")
def _create_file(ctx: Ctx) -> Any:
    """Create a file in /tmp."""
    with open("/tmp/hostile-lockdown-was-here", "wb") as f:
        f.write(b"x")


@attack("list_dir")
def _list_dir(ctx: Ctx) -> Any:
    """List /."""
    return os.listdir("/")


@attack("stat_path")
def _stat_path(ctx: Ctx) -> Any:
    """Learn a file's metadata."""
    return os.stat("/etc/shadow").st_size


@attack("access_path")
def _access_path(ctx: Ctx) -> Any:
    """Probe a path with access(2)."""
    return checked(libc.access(b"/etc/passwd", os.R_OK))


@attack("readlink")
def _readlink(ctx: Ctx) -> Any:
    """Find the interpreter's path through /proc/self/exe."""
    return os.readlink("/proc/self/exe")


@attack("openat2")
def _openat2(ctx: Ctx) -> Any:
    """Open a file with openat2(2) (struct open_how, 24 bytes of zeros: O_RDONLY)."""
    how = ctypes.create_string_buffer(24)
    return syscall("openat2", -100, ctypes.c_char_p(b"/etc/passwd"), how, 24)


@attack("getcwd")
def _getcwd(ctx: Ctx) -> Any:
    """Learn the working directory."""
    return os.getcwd()


@attack("lazy_import")
def _lazy_import(ctx: Ctx) -> Any:
    """Import a module that was not loaded before lockdown (it must fail, not crash)."""
    import xml.dom.minidom  # noqa: F401  (the point is that this import fails)


# --- processes, threads, programs (killed) --------------------------------------------------


@attack("fork")
def _fork(ctx: Ctx) -> Any:
    """Start a process with os.fork (clone)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return pid


@attack("vfork")
def _vfork(ctx: Ctx) -> Any:
    """Start a process with vfork(2)."""
    return syscall("vfork")


@attack("clone")
def _clone(ctx: Ctx) -> Any:
    """Start a process with a raw clone(SIGCHLD)."""
    return syscall("clone", signal.SIGCHLD, 0, 0, 0, 0)


@attack("clone3")
def _clone3(ctx: Ctx) -> Any:
    """Start a process with clone3(2) (struct clone_args of zeros)."""
    args = ctypes.create_string_buffer(88)
    return syscall("clone3", args, 88)


@attack("thread")
def _thread(ctx: Ctx) -> Any:
    """Start a thread (threading.Thread: pthread_create, clone3)."""
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()


@attack("exec")
def _exec(ctx: Ctx) -> Any:
    """Replace the process with another program (execve)."""
    os.execv("/bin/sh", ["sh", "-c", "echo escaped"])


@attack("execveat")
def _execveat(ctx: Ctx) -> Any:
    """Run a program with execveat(2)."""
    argv = (ctypes.c_char_p * 2)(b"sh", None)
    return syscall("execveat", -100, ctypes.c_char_p(b"/bin/sh"), argv, argv, 0)


@attack("ptrace_traceme")
def _ptrace_traceme(ctx: Ctx) -> Any:
    """ptrace(PTRACE_TRACEME)."""
    return syscall("ptrace", 0, 0, 0, 0)


@attack("ptrace_attach")
def _ptrace_attach(ctx: Ctx) -> Any:
    """Attach to the zygote (a sibling sandbox would be the same) with ptrace."""
    return syscall("ptrace", 16, ctx.zygote_pid, 0, 0)


@attack("kill_init")
def _kill_init(ctx: Ctx) -> Any:
    """Signal pid 1 (kill(1, 0))."""
    os.kill(1, 0)


@attack("kill_zygote")
def _kill_zygote(ctx: Ctx) -> Any:
    """Signal the zygote, the process that forked this one."""
    os.kill(ctx.zygote_pid, 0)


@attack("tgkill")
def _tgkill(ctx: Ctx) -> Any:
    """Signal a thread of another process with tgkill(2)."""
    return syscall("tgkill", ctx.zygote_pid, ctx.zygote_pid, 0)


@attack("socket_inet")
def _socket_inet(ctx: Ctx) -> Any:
    """Open a TCP socket."""
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)


@attack("socket_unix")
def _socket_unix(ctx: Ctx) -> Any:
    """Open a Unix socket."""
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)


@attack("socketpair")
def _socketpair(ctx: Ctx) -> Any:
    """Make a socket pair."""
    socket.socketpair()


# --- kernel attack surface (killed) ---------------------------------------------------------


@attack("io_uring_setup")
def _io_uring_setup(ctx: Ctx) -> Any:
    """Set up an io_uring (a way around seccomp: its operations are not syscalls)."""
    params = ctypes.create_string_buffer(120)
    return syscall("io_uring_setup", 8, params)


@attack("bpf")
def _bpf(ctx: Ctx) -> Any:
    """Create an eBPF map."""
    attr = ctypes.create_string_buffer(128)
    return syscall("bpf", 0, attr, 128)


@attack("userfaultfd")
def _userfaultfd(ctx: Ctx) -> Any:
    """Create a userfaultfd (a classic aid to kernel race exploits)."""
    return syscall("userfaultfd", 0)


@attack("memfd_create")
def _memfd_create(ctx: Ctx) -> Any:
    """Create an anonymous file (memfd_create)."""
    return os.memfd_create("payload")


@attack("perf_event_open")
def _perf_event_open(ctx: Ctx) -> Any:
    """Open a perf event."""
    attr = ctypes.create_string_buffer(128)
    return syscall("perf_event_open", attr, 0, -1, -1, 0)


@attack("process_vm_readv")
def _process_vm_readv(ctx: Ctx) -> Any:
    """Read the zygote's memory with process_vm_readv."""
    return syscall("process_vm_readv", ctx.zygote_pid, 0, 0, 0, 0, 0)


@attack("keyctl")
def _keyctl(ctx: Ctx) -> Any:
    """Reach the kernel keyring (keyctl KEYCTL_GET_KEYRING_ID)."""
    return syscall("keyctl", 0, -3, 0)


@attack("add_key")
def _add_key(ctx: Ctx) -> Any:
    """Add a key to a keyring."""
    return syscall("add_key", ctypes.c_char_p(b"user"), ctypes.c_char_p(b"k"), 0, 0, -3)


@attack("seccomp")
def _seccomp(ctx: Ctx) -> Any:
    """Call seccomp(2) (e.g. to set up a listener)."""
    return syscall("seccomp", 0, 0, 0)


@attack("personality")
def _personality(ctx: Ctx) -> Any:
    """Set READ_IMPLIES_EXEC with personality(2)."""
    return syscall("personality", 0x0400000)


@attack("unshare")
def _unshare(ctx: Ctx) -> Any:
    """Make a user namespace (unshare CLONE_NEWUSER)."""
    return checked(libc.unshare(0x10000000))


@attack("setns")
def _setns(ctx: Ctx) -> Any:
    """Join a namespace with setns(2)."""
    return syscall("setns", 0, 0)


@attack("mount")
def _mount(ctx: Ctx) -> Any:
    """Mount a tmpfs."""
    return checked(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))


@attack("chdir")
def _chdir(ctx: Ctx) -> Any:
    """Change directory to /."""
    os.chdir("/")


@attack("chroot")
def _chroot(ctx: Ctx) -> Any:
    """chroot to /."""
    os.chroot("/")


@attack("x32_syscall")
def _x32_syscall(ctx: Ctx) -> Any:
    """Call getpid through the x32 ABI (number | 0x40000000), a filter bypass if unchecked."""
    if pyseccomp.system_arch() != pyseccomp.Arch.X86_64:
        raise NotImplementedError("x32 exists only on x86_64")
    return checked(libc.syscall(ctypes.c_long(0x40000000 | 39)))


# --- memory (executable memory killed) -----------------------------------------------------


@attack("mmap_exec")
def _mmap_exec(ctx: Ctx) -> Any:
    """Map memory that is writable and executable."""
    prot = mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
    mmap.mmap(-1, 4096, prot=prot)


@attack("mprotect_exec")
def _mprotect_exec(ctx: Ctx) -> Any:
    """Make an anonymous page executable with mprotect."""
    page = mmap.mmap(-1, 4096)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return checked(libc.mprotect(ctypes.c_void_p(address), 4096, mmap.PROT_READ | mmap.PROT_EXEC))


@attack("mmap_stdin")
def _mmap_stdin(ctx: Ctx) -> Any:
    """Map an fd (stdin), not anonymous memory: mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 0, 0)."""
    libc.mmap.restype = ctypes.c_void_p
    address = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, 0, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return address


# --- identity, limits, signals, misc --------------------------------------------------------


@attack("setuid")
def _setuid(ctx: Ctx) -> Any:
    """Become root with setuid(0)."""
    os.setuid(0)


@attack("setgid")
def _setgid(ctx: Ctx) -> Any:
    """Join group 0 with setgid(0)."""
    os.setgid(0)


@attack("setresuid")
def _setresuid(ctx: Ctx) -> Any:
    """Change uids with setresuid."""
    os.setresuid(0, 0, 0)


@attack("setgroups")
def _setgroups(ctx: Ctx) -> Any:
    """Add group 0 with setgroups."""
    os.setgroups([0])


@attack("raise_nofile")
def _raise_nofile(ctx: Ctx) -> Any:
    """Raise RLIMIT_NOFILE back to 1024 (prlimit64 on pid 0 passes the filter; the kernel
    refuses to raise a hard limit)."""
    limit = (ctypes.c_ulong * 2)(1024, 1024)
    return checked(libc.setrlimit(resource.RLIMIT_NOFILE, limit))


@attack("raise_cpu")
def _raise_cpu(ctx: Ctx) -> Any:
    """Raise the RLIMIT_CPU hard limit."""
    limit = (ctypes.c_ulong * 2)(10_000, 10_000)
    return checked(libc.setrlimit(resource.RLIMIT_CPU, limit))


@attack("prlimit_other")
def _prlimit_other(ctx: Ctx) -> Any:
    """Read or change another process's limits (prlimit64 with a pid)."""
    old = (ctypes.c_ulong * 2)()
    return syscall("prlimit64", ctx.zygote_pid, resource.RLIMIT_NOFILE, 0, old)


@attack("prctl")
def _prctl(ctx: Ctx) -> Any:
    """Make the process dumpable again with prctl(PR_SET_DUMPABLE, 1)."""
    return checked(libc.prctl(4, ctypes.c_ulong(1), 0, 0, 0))


@attack("ioctl_tiocsti")
def _ioctl_tiocsti(ctx: Ctx) -> Any:
    """Push input into a terminal with ioctl(TIOCSTI)."""
    return fcntl.ioctl(0, termios.TIOCSTI, b"x")


@attack("dup")
def _dup(ctx: Ctx) -> Any:
    """Make a new fd with dup."""
    return os.dup(1)


@attack("fcntl_dupfd")
def _fcntl_dupfd(ctx: Ctx) -> Any:
    """Make a new fd with fcntl(F_DUPFD)."""
    return fcntl.fcntl(1, fcntl.F_DUPFD, 0)


@attack("clock_other_process")
def _clock_other_process(ctx: Ctx) -> Any:
    """Read pid 1's CPU clock (clock id ((~1) << 3) | CPUCLOCK_SCHED)."""
    return time.clock_gettime((~1 << 3) | 2)


@attack("futex_lock_pi")
def _futex_lock_pi(ctx: Ctx) -> Any:
    """Use a PI futex op (FUTEX_LOCK_PI), a long-standing kernel exploit surface."""
    word = ctypes.c_uint32(0)
    return syscall("futex", ctypes.byref(word), 6, 0, 0, 0, 0)


@attack("sleep")
def _sleep(ctx: Ctx) -> Any:
    """Sleep (clock_nanosleep): a script has no timer."""
    time.sleep(0.01)


# --- what the confined process may do ------------------------------------------------------


@attack("fds")
def _fds(ctx: Ctx) -> Any:
    """List open fds without /proc: fcntl(F_GETFD) on 0..1023."""
    open_fds = []
    for fd in range(1024):
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError as e:
            if e.errno != errno.EBADF:
                raise
        else:
            open_fds.append(fd)
    return open_fds


class _LibcWithoutCloseRange:
    """libc as on a kernel before 5.9: close_range fails with ENOSYS."""

    def __init__(self, real: ctypes.CDLL) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def syscall(self, number: int, *args: Any) -> int:
        if number == nr("close_range"):
            ctypes.set_errno(errno.ENOSYS)
            return -1
        return int(self.real.syscall(number, *args))


def _without_close_range() -> None:
    lockdown._libc = _LibcWithoutCloseRange(lockdown._libc)  # type: ignore[assignment]


@attack("fds_without_close_range", before=_without_close_range)
def _fds_without_close_range(ctx: Ctx) -> Any:
    """As ``fds``, when apply() had to close what /proc/self/fd listed (no close_range)."""
    return _fds(ctx)


@attack("identity")
def _identity(ctx: Ctx) -> Any:
    """Report uids, gids and the environment as the process sees them (getgroups is not
    allowed: the parent reads Groups from /proc/<pid>/status)."""
    return {"uids": os.getresuid(), "gids": os.getresgid(), "environ": dict(os.environ)}


@attack("heap_limit", data_limit=192 * MiB)
def _heap_limit(ctx: Ctx) -> Any:
    """Allocate past RLIMIT_DATA (192 MiB here): MemoryError, not a kill."""
    block = bytearray(256 * MiB)
    return len(block)


@attack("tightened_limits")
def _tightened_limits(ctx: Ctx) -> Any:
    """Tighten to compute_ms=1500, memory=64 MiB and pause so the parent reads the limits."""
    lockdown.tighten(compute_ms=1500, memory=64 * MiB)
    ctx.pause({"tightened": True})
    lockdown.tighten(compute_ms=60_000, memory=4096 * MiB)  # must not raise anything
    ctx.pause({"tightened_again": True})


def _busy() -> None:
    while True:
        pass


@attack("busy_loop")
def _busy_loop(ctx: Ctx) -> Any:
    """Spin after tighten(compute_ms=200): ITIMER_PROF's SIGPROF must end the process."""
    lockdown.tighten(compute_ms=200, memory=64 * MiB)
    _busy()


@attack("busy_loop_soft_stop_ignored")
def _busy_loop_soft_stop_ignored(ctx: Ctx) -> Any:
    """Spin after tighten(compute_ms=200) with a soft stop whose handler never ends the run
    (as one that finds no point to: a run stuck in C code): the hard stop's SIGVTALRM must
    end the process hard_stop_ms(200) later."""
    lockdown.stop_softly(lambda signum, frame: None)
    lockdown.tighten(compute_ms=200, memory=64 * MiB)
    _busy()


@attack("busy_loop_soft_stop_no_room")
def _busy_loop_soft_stop_no_room(ctx: Ctx) -> Any:
    """As busy_loop_soft_stop_ignored under compute_ms=100, which has no room for a soft
    stop within its 10%: SIGPROF must end the process at its allowance."""
    lockdown.stop_softly(lambda signum, frame: None)
    lockdown.tighten(compute_ms=100, memory=64 * MiB)
    _busy()


@attack("kernel_loop_soft_stop_ignored")
def _kernel_loop_soft_stop_ignored(ctx: Ctx) -> Any:
    """As busy_loop_soft_stop_ignored, in a loop that is nearly all the kernel's CPU (each
    string, past malloc's largest mmap threshold, faults in fresh pages): the hard stop
    must count system CPU too (a timer of user CPU alone left the process to RLIMIT_CPU's
    SIGXCPU, 2 s on)."""
    lockdown.stop_softly(lambda signum, frame: None)
    lockdown.tighten(compute_ms=200, memory=64 * MiB)
    while True:
        b"x" * (40 * MiB)


def _ignore_sigprof() -> None:
    signal.signal(signal.SIGPROF, signal.SIG_IGN)


@attack("busy_loop_sigprof_ignored", before=_ignore_sigprof)
def _busy_loop_sigprof_ignored(ctx: Ctx) -> Any:
    """Spin with SIGPROF ignored before lockdown (as a parent could leave it): tighten must
    restore the default action."""
    lockdown.tighten(compute_ms=200, memory=64 * MiB)
    _busy()


@attack("busy_loop_timer_disarmed")
def _busy_loop_timer_disarmed(ctx: Ctx) -> Any:
    """Disarm ITIMER_PROF after tighten(compute_ms=200) and spin: RLIMIT_CPU (2 s soft)
    must end the process with SIGXCPU."""
    lockdown.tighten(compute_ms=200, memory=64 * MiB)
    signal.setitimer(signal.ITIMER_PROF, 0)
    _busy()


def _start_thread() -> None:
    threading.Thread(target=threading.Event().wait, daemon=True).start()


@attack("threads_before_lockdown", before=_start_thread)
def _threads_before_lockdown(ctx: Ctx) -> Any:
    """Not reached: apply() must refuse a process with a second thread."""
    return "lockdown accepted two threads"


class _Model(pydantic.BaseModel):
    name: str
    values: list[float]
    meta: dict[str, Any] = {}


def warm_up() -> None:
    """What the sandbox must do before lockdown: run every code path once. The sandbox's own
    warm-up runs too, so every attack meets a process with both runtimes loaded (QuickJS and
    the Python runtime with its allowed modules), as a real sandbox process is."""
    sandbox_main._warm_up()
    model = _Model.model_validate({"name": "w", "values": [1, 2.5], "meta": {"k": [1]}})
    _Model.model_validate_json(model.model_dump_json()).model_dump()
    orjson.loads(orjson.dumps({"a": [1, 2.5, "x", None]}))
    context = _quickjs.Context()
    context.add_callable("f", lambda text: text)
    context.eval("f(JSON.stringify({a: 1}))")
    with contextlib.suppress(_quickjs.JSException):
        context.eval("null.x")


@attack("workload")
def _workload(ctx: Ctx) -> Any:
    """What a sandbox run does, all under the filter: read a line, tighten, run QuickJS with
    a memory and stack limit, call Python from JS, grow large arrays and strings, JSON through
    orjson and pydantic, catch deep recursion and the heap limit, write to stdout."""
    line = sys.stdin.buffer.readline()
    lockdown.tighten(compute_ms=5000, memory=64 * MiB)
    context = _quickjs.Context()
    context.set_memory_limit(48 * MiB)
    context.set_max_stack_size(1 * MiB)
    calls: list[str] = []

    def host(text: str) -> str:
        calls.append(text)
        data = orjson.loads(text)
        model = _Model.model_validate({"name": "host", "values": [len(data["items"])]})
        return orjson.dumps({"seen": model.model_dump()}).decode()

    context.add_callable("host", host)
    context.set("input", orjson.dumps(orjson.loads(line)).decode())
    answer = context.eval(
        """
        const items = [];
        for (let i = 0; i < 100000; i++) items.push({i, s: 'x' + i});
        const big = 'y'.repeat(1 << 22) + JSON.parse(input).tag;
        const reply = JSON.parse(host(JSON.stringify({items: items.slice(0, 1000)})));
        JSON.stringify({n: items.length, big: big.length, reply, input: JSON.parse(input)})
        """
    )
    recursion = context.eval(
        "function deep(n) { return deep(n + 1) + 1 }"
        "try { deep(0); 'no error' } catch (e) { e.name + ': ' + e.message }"
    )
    out_of_memory = context.eval(
        "const hog = [];"
        "try { while (true) hog.push('z'.repeat(1 << 20) + hog.length); 'no error' }"
        "catch (e) { e.name + ': ' + e.message }"
    )
    sys.stdout.write("printed through sys.stdout\n")
    sys.stdout.flush()
    return {
        "answer": orjson.loads(answer),
        "recursion": recursion,
        "out_of_memory": out_of_memory,
        "calls": len(calls),
        "rusage_ms": resource.getrusage(resource.RUSAGE_SELF).ru_utime * 1000,
    }


@attack("python_workload")
def _python_workload(ctx: Ctx) -> Any:
    """What a Python run does, all under the filter: every allowed module, a recorded call,
    gather, printing, errors, a memory error caught and the heap limit met uncaught."""
    lockdown.tighten(compute_ms=5000, memory=64 * MiB)
    code = (
        "import " + ", ".join(python.ALLOWED) + "\n"
        "r = await tools.t(a=1)\n"
        "x = await asyncio.gather(tools.t(a=1), asyncio.sleep(0))\n"
        "print('hi', json.dumps(r), datetime.datetime.now(), random.random(), uuid.uuid4())\n"
        "h = hashlib.sha256(b'x').hexdigest()\n"
        "d = datetime.datetime.strptime('2020-02-03', '%Y-%m-%d').isoformat()\n"
        "try:\n    b = 'z' * (1 << 34)\nexcept MemoryError:\n    b = 'caught'\n"
        "def deep(n):\n    return deep(n + 1)\n"
        "try:\n    deep(0)\nexcept RecursionError as e:\n    rec = type(e).__name__\n"
        "u = urllib.parse.urlsplit('http://[::1]:8/p?q=%20x')\n"
        "sem = asyncio.Semaphore(1)\n"
        "async def one():\n    async with sem:\n        return await tools.t(a=1)\n"
        "async with asyncio.TaskGroup() as tg:\n    g = tg.create_task(one())\n"
        "return [r, h[:8], d, b, rec, statistics.mean([1, 2]), str(decimal.Decimal('0.1') * 3),\n"
        "        [u.hostname, u.port, urllib.parse.parse_qs(u.query)], g.result()]"
    )
    records = [protocol.Record(name="t", arguments={"a": 1}, result={"ok": 1})]
    script = protocol.Script(
        id="python-workload",
        language="python",
        code=code,
        records=records * 3,
        tools=["t"],
        clock=protocol.Clock(now_ms=0, seed=1),
    )
    ran = runtime.run_in_process(script)
    hog = runtime.run_in_process(
        script.model_copy(update={"code": "a = []\nwhile True:\n    a.append('y' * 100000)"})
    )
    return {
        "outcome": ran.outcome,
        "value": ran.value,
        "error": None if ran.error is None else ran.error.model_dump(),
        "printed": ran.printed,
        "hog": None if hog.limit is None else hog.limit.name,
    }


# --- running --------------------------------------------------------------------------------


def outcome(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"ok": fn()}
    except NotImplementedError as e:
        return {"skip": str(e)}
    except OSError as e:
        code = errno.errorcode.get(e.errno or 0, str(e.errno))
        return {"errno": code, "exception": type(e).__name__, "message": str(e)}
    except Exception as e:
        return {"exception": type(e).__name__, "message": str(e)}


def child(name: str, *, bpf: bytes | None, zygote_pid: int) -> int:
    """Lock down, say ready, wait for the go line, run the attack, report; the exit code."""
    chosen = ATTACKS[name]
    if chosen.before is not None:
        chosen.before()
    try:
        lockdown.apply(filter_bpf=bpf, **chosen.apply_kwargs)
    except lockdown.LockdownError as e:
        send({"unconfined": {"step": e.step, "error": str(e)}})
        return EXIT_UNCONFINED
    send({"ready": {"pid": os.getpid()}})
    read_line()
    ctx = Ctx(zygote_pid=zygote_pid)
    send({"result": outcome(lambda: chosen.run(ctx))})
    return 0


def _leak() -> list[object]:
    """Resources a careless parent leaves open: the children must not keep any of them."""
    os.environ["ZYGOTE_SECRET"] = "must not reach the child"
    kept: list[object] = [os.open("/dev/null", os.O_RDONLY), *os.pipe()]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    kept.append(sock)
    for item in kept:
        if isinstance(item, int):
            os.set_inheritable(item, True)
    return kept


def zygote() -> None:
    warm_up()
    lockdown.prepare()
    bpf = lockdown.export_bpf()
    kept = _leak()
    me = os.getpid()
    while True:
        name = read_line().decode().strip()
        if not name:
            return
        if name not in ATTACKS:
            send({"status": {"error": f"unknown attack {name!r}"}})
            continue
        pid = os.fork()
        if pid == 0:
            code = EXIT_CRASHED
            try:
                code = child(name, bpf=bpf, zygote_pid=me)
            except BaseException as e:
                send({"crashed": {"exception": type(e).__name__, "message": str(e)}})
            finally:
                os._exit(code)
        _, status, usage = os.wait4(pid, 0)
        cpu_ms = (usage.ru_utime + usage.ru_stime) * 1000
        if os.WIFSIGNALED(status):
            send({"status": {"signal": os.WTERMSIG(status), "cpu_ms": cpu_ms}})
        else:
            send({"status": {"exit": os.waitstatus_to_exitcode(status), "cpu_ms": cpu_ms}})
    del kept


def fresh(name: str) -> None:
    warm_up()
    code = child(name, bpf=None, zygote_pid=os.getppid())
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zygote"]:
        zygote()
    elif sys.argv[1:2] == ["--fresh"]:
        fresh(sys.argv[2])
    else:
        sys.exit("usage: python -m tests.hostile.child --zygote | --fresh ATTACK")
