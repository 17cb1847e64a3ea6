"""Confine the sandbox process before it reads a script: one function per kernel mechanism.

:func:`apply` runs the whole sequence, in this order (nsjail style, seccomp last)::

    0. preflight     look up ``nobody``, check the process is single-threaded, have the BPF
                     (files can still be opened here; nothing is locked yet)
    1. fds           close every fd but 0/1/2; 0/1/2 must be pipes, sockets or /dev/null-like
    2. environment   empty ``os.environ``
    3. rlimits       CPU, heap, no files, no processes, no core, no locked memory, 8 MiB stack,
                     and ``SCHED_BATCH`` (:func:`batch_scheduling`)
    4. identity      root drops to ``nobody`` (groups, gid, uid) and cannot come back
    5. prctl         not dumpable, no new privileges, killed when its parent ends
    6. seccomp       the syscall allowlist of :func:`build_filter`, killing everything else

After it the process can read and write the fds it has, allocate memory, read clocks and
exit. :func:`tighten` then lowers the CPU and heap limits to one script's once the script
has been read. The seccomp policy (:func:`build_filter`):

- **allowed**: read, write, readv, writev, lseek, fstat, close (on the fds it has; nothing
  can make a new one); brk, munmap, mremap, madvise; mmap of anonymous memory and mprotect,
  both only without ``PROT_EXEC``; rt_sigaction, rt_sigprocmask, rt_sigreturn, sigaltstack,
  restart_syscall; getpid, gettid and the get*id calls; getrusage, getitimer, setitimer;
  getrlimit, setrlimit, and prlimit64 on pid 0 only (the kernel refuses raising a hard
  limit); futex wait/wake ops (no PI, no requeue); clock_gettime/clock_getres on the
  process's and the system's clocks only; fcntl F_GETFD/F_SETFD/F_GETFL/F_SETFL;
  sched_yield; getrandom; exit, exit_group.
- **refused with an errno**, because Python and glibc make these calls on their own and
  should fail cleanly: open, openat, openat2, creat, stat, lstat, newfstatat, statx, access,
  faccessat, faccessat2, readlink, readlinkat get ``EACCES``; ioctl gets ``ENOTTY`` (isatty);
  prctl ``EPERM``; getcwd ``ENOENT`` (importlib then skips the cwd).
- **everything else kills the process** (``SIGSYS``): sockets, fork, vfork, clone, clone3
  (so no thread either), execve, execveat, ptrace, kill/tkill/tgkill (to any process, itself
  included: the filter is built once for many children and cannot name their pid, so
  ``abort()`` ends in ``SIGSYS`` rather than ``SIGABRT``; either way the process ends),
  dup*, pipes, io_uring, bpf, userfaultfd, memfd_create, personality, unshare, setns, mount,
  set*id, chroot, chdir, keyctl, perf_event_open, process_vm_*, seccomp, sleeping, and i386
  or x32 system calls.

Contracts for the caller:

- Start the process with **no environment of the host's** (the runner gives it only
  ``PYTHONHASHSEED=0``, no secret). ``os.environ.clear()`` unsets the variables, but their
  original text stays in the process's memory and in ``/proc/<pid>/environ``; only a process
  started without them has none. A fork server must itself have been started that way.
- **Import and warm up everything first.** After lockdown no file can be opened, so nothing
  may load lazily: import ``_quickjs``, ``orjson``, pydantic models and run each code path
  once (pydantic and the ``encodings`` package import modules on first use).
- Use ``_quickjs``, not ``quickjs``: importing ``quickjs`` starts a thread, and
  :func:`apply` refuses a process with more than one thread (a filter loaded in one thread
  does not bind the others).
- A fork server calls :func:`prepare` and :func:`export_bpf` once, then
  ``apply(filter_bpf=...)`` in each child: loading pre-built BPF costs well under a
  millisecond, building the filter with libseccomp costs a few.

Linux only. The filter is built for the native architecture; x86_64 and aarch64 are the
ones it is written and tested for.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import math
import os
import pwd
import resource
import signal
import stat
import threading
from collections.abc import Callable, Iterable
from types import FrameType

# Imported at module import on purpose: importing pyseccomp runs ldconfig to find
# libseccomp, which must happen while the process can still start programs and open files.
import pyseccomp

from sandbox import protocol

__all__ = [
    "LockdownError",
    "apply",
    "build_filter",
    "export_bpf",
    "prepare",
    "tighten",
]

MiB = 1024 * 1024

# The main thread's C stack. QuickJS bounds its own stack at 1 MiB (set_max_stack_size);
# Python, pydantic-core and orjson frames come on top. Only the main thread exists.
STACK_BYTES = 8 * MiB
# fds 0, 1 and 2 are all the process uses; nothing after lockdown can create another.
NOFILE = 3
# Used when no `nobody` entry can be found (the traditional value).
NOBODY_FALLBACK = 65534

# prctl(2) options.
_PR_SET_PDEATHSIG = 1
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_GET_SECCOMP = 21
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39
_SECCOMP_MODE_FILTER = 2
# Classic BPF: 8 bytes per instruction, at most 4096 instructions (BPF_MAXINSNS).
_BPF_INSN = 8
_BPF_MAXINSNS = 4096
# close_range(2) has this number on every architecture (asm-generic numbering, Linux 5.9).
_SYS_CLOSE_RANGE = 436
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Argument values the filter compares (same on x86_64 and aarch64).
_PROT_EXEC = 0x4
_MAP_ANONYMOUS = 0x20
_FUTEX_PRIVATE_FLAG = 128
_FUTEX_CLOCK_REALTIME = 256
_FUTEX_OPS = {"FUTEX_WAIT": 0, "FUTEX_WAKE": 1, "FUTEX_WAIT_BITSET": 9, "FUTEX_WAKE_BITSET": 10}
_CLOCKS = {
    "CLOCK_REALTIME": 0,
    "CLOCK_MONOTONIC": 1,
    "CLOCK_PROCESS_CPUTIME_ID": 2,
    "CLOCK_THREAD_CPUTIME_ID": 3,
    "CLOCK_MONOTONIC_RAW": 4,
    "CLOCK_REALTIME_COARSE": 5,
    "CLOCK_MONOTONIC_COARSE": 6,
    "CLOCK_BOOTTIME": 7,
}
_FCNTL_CMDS = {"F_GETFD": 1, "F_SETFD": 2, "F_GETFL": 3, "F_SETFL": 4}
# Compare only the low 32 bits of an `int` argument: the ABI leaves the high half of the
# register undefined, and the kernel ignores it.
_LOW32 = 0xFFFFFFFF

_STDIO = ((0, "stdin"), (1, "stdout"), (2, "stderr"))

_libc = ctypes.CDLL(None, use_errno=True)


class LockdownError(Exception):
    """The process could not confine itself; it must not run a script.

    ``step`` names the step that failed (``"fds"``, ``"rlimit RLIMIT_DATA"``, ``"seccomp"``...),
    ``detail`` says why.
    """

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"lockdown step {step!r} failed: {detail}")
        self.step = step
        self.detail = detail


# --- the sequence ----------------------------------------------------------------------------


def apply(
    *,
    memory: int = protocol.DEFAULT_LIMITS["memory"],
    data_limit: int | None = None,
    cpu_seconds: int = protocol.PROCESS_CPU_SECONDS,
    filter_bpf: bytes | None = None,
    room: int = 0,
) -> None:
    """Confine this process for good, or raise :class:`LockdownError` naming the failed step.

    ``memory`` is the JS heap limit the process will use; the process heap (``RLIMIT_DATA``)
    is ``data_limit`` or ``protocol.process_heap(memory)``, plus ``room`` (what the process
    must hold besides: the script line it is about to read). ``cpu_seconds`` is the
    ``RLIMIT_CPU`` backstop until :func:`tighten` lowers it. ``filter_bpf`` is a filter from
    :func:`export_bpf`; without it the filter is built here.

    Preconditions: single-threaded, everything imported and warmed up (pydantic imports
    lazily: validate and dump each model once), started with no environment of the host's,
    so that ``/proc/<pid>/environ`` holds none of it (see the module docstring). On failure the
    process is left partly confined and must exit without running a script. Nothing is logged.
    """
    if filter_bpf is not None:
        _check_bpf(filter_bpf)  # a bad argument fails before anything changes
    nobody = _nobody()
    parent = os.getppid()
    _check_single_threaded()
    bpf = export_bpf() if filter_bpf is None else filter_bpf

    _close_fds()
    _check_stdio()
    _clear_environment()
    _set_rlimits(memory=memory, data_limit=data_limit, cpu_seconds=cpu_seconds, room=room)
    batch_scheduling()
    _drop_privileges(*nobody)
    _set_process_flags(parent)
    _load_seccomp(bpf)


def tighten(
    *,
    compute_ms: int,
    memory: int,
    data_limit: int | None = None,
    room: int = 0,
    live: bool = False,
    live_room: int = 0,
) -> None:
    """Lower the limits to one script's, after it was read (so under seccomp).

    ``RLIMIT_CPU`` becomes ``ceil(compute_ms / 1000) + 1`` soft and ``+ 2`` hard, a backstop
    a second or two past the allowance (``live``: the hard limit stays the process's,
    :data:`protocol.PROCESS_CPU_SECONDS` at most, and :func:`rearm` moves the soft one on with
    each segment); ``RLIMIT_DATA`` becomes
    ``data_limit`` or ``protocol.process_heap(memory)``, plus ``room`` (what the step
    carries: its call log; ``live``: its hard limit is ``live_room`` more, what the run's
    results lines may need, which :func:`set_heap` gives them as they come). Limits are only
    ever lowered. Then ``ITIMER_PROF`` is armed for
    ``compute_ms`` of CPU (less the tick the kernel rounds it up by): its ``SIGPROF``, left at
    the default action, ends the process when the allowance is spent (or the timers of a
    soft stop are, see :func:`stop_softly`). Call it from the main thread. Raises
    :class:`LockdownError`.
    """
    if compute_ms < 1:
        raise LockdownError("tighten", f"compute_ms must be at least 1, not {compute_ms}")
    seconds = math.ceil(compute_ms / 1000)
    hard = protocol.PROCESS_CPU_SECONDS + 1 if live else seconds + 2
    _lower("RLIMIT_CPU", resource.RLIMIT_CPU, seconds + 1, hard)
    data = heap_limit(memory, data_limit, room)
    _lower("RLIMIT_DATA", resource.RLIMIT_DATA, data, data + live_room if live else data)
    _arm(compute_ms)


def set_heap(memory: int | None, data_limit: int | None = None, room: int = 0) -> None:
    """A live process's ``RLIMIT_DATA`` set again, within the hard limit :func:`tighten` set:
    as tighten sets it for ``memory``, ``data_limit`` and ``room``, or (``memory`` None) up
    to that hard limit. Raises :class:`LockdownError`."""
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        soft = hard if memory is None else heap_limit(memory, data_limit, room)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (OSError, ValueError) as e:
        raise LockdownError("set_heap", f"cannot set RLIMIT_DATA: {e}") from e


def rehearse() -> None:
    """After :func:`apply`, go through :func:`tighten`'s calls and change nothing: every limit
    asked for is past the one apply() set (limits are only ever lowered) and the CPU timer
    is disarmed again at once (the soft stop's two timers are made, and left unarmed). A
    forked child does this while it waits for a script, so the copies of the fork server's
    pages that tighten writes are made then, not on the step's clock (about 0.15 ms of a
    trivial step). Raises :class:`LockdownError`."""
    tighten(compute_ms=_NEVER_MS, memory=protocol.Limits().memory, data_limit=_NO_LIMIT, live=True)
    try:
        signal.setitimer(signal.ITIMER_PROF, 0)
        for signo in (signal.SIGPROF, signal.SIGVTALRM):
            # Made here, unarmed, for a soft stop's tighten to arm: making the first one took
            # 0.07 to 0.09 ms of a trivial step's child (timer_create, ctypes' first calls).
            _timer(signo)
            _set_timer(signo, 0)
    except (OSError, ValueError) as e:
        raise LockdownError("rehearse", f"cannot disarm the CPU timer: {e}") from e


# Past any limit in force: what rehearse() asks for (a day of CPU, an exabyte of heap).
_NEVER_MS = 86_400_000
_NO_LIMIT = 1 << 60


def rearm(compute_ms: int) -> None:
    """A live process's next segment: ``compute_ms`` of CPU again (``ITIMER_PROF``), and the
    ``RLIMIT_CPU`` backstop a second or two past it, within the hard limit set at
    :func:`apply` (:data:`protocol.PROCESS_CPU_SECONDS` by default). Raises
    :class:`LockdownError`."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = math.ceil(usage.ru_utime + usage.ru_stime)
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = used + math.ceil(compute_ms / 1000) + 1
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (OSError, ValueError) as e:
        raise LockdownError("rearm", f"cannot move the CPU backstop on: {e}") from e
    _arm(compute_ms, first=False)


# Once a segment's CPU allowance is spent, the CPU a process whose SIGPROF has a handler (see
# stop_softly) gets at most to end its run itself before SIGVTALRM ends it: with the tick the
# kernel checks CPU timers at and the process's exit, a limit overshot by under 10% and 50 ms.
HARD_STOP_MS = 40
# The least of it a soft stop is given: the kernel fires a CPU timer on a tick (4 ms at
# 250 Hz), up to a tick late.
_SOFT_LEAST_MS = 10


def hard_stop_ms(compute_ms: int) -> int:
    """The CPU a process whose soft stop (:func:`stop_softly`) has not ended it gets past
    ``compute_ms`` before SIGVTALRM ends it: 8% of it, :data:`HARD_STOP_MS` at most; 0 for
    a ``compute_ms`` under 125 ms, which has no room for both within its 10%: no soft stop
    then, SIGPROF ends the process at ``compute_ms``, its output lost.

    The kernel checks a CPU timer only at a tick that finds the process on a CPU: on a
    loaded machine it may run past its allowance for several ticks' worth of its CPU
    before either timer is seen to fire, and when both are seen at one tick the hard stop
    ends it before the handler runs. The wider the gap, the rarer that is: with a gap of
    5% (15 ms at 300 ms) one soft stop in 70 was lost so on 2 vCPUs running four busy loops
    beside it; with 8% (24 ms) none was in the same test's runs."""
    ms = min(HARD_STOP_MS, compute_ms * 8 // 100)
    return ms if ms >= _SOFT_LEAST_MS else 0


class _TimeSpec(ctypes.Structure):
    _fields_ = (("sec", ctypes.c_long), ("nsec", ctypes.c_long))


class _ITimerSpec(ctypes.Structure):
    _fields_ = (("interval", _TimeSpec), ("value", _TimeSpec))


class _SigEvent(ctypes.Structure):
    # Linux's struct sigevent: the value, the signal, how to notify, and a union (64 bytes).
    _fields_ = (
        ("value", ctypes.c_void_p),
        ("signo", ctypes.c_int),
        ("notify", ctypes.c_int),
        ("rest", ctypes.c_byte * 48),
    )


# The CPU a process has run, exactly, as wait4 charges it: ITIMER_PROF's clock, sampled at the
# tick, lagged it in a process that waits often (a loop of file reads: 330 to 380 ms charged
# under a 300 ms timer).
_CLOCK_PROCESS_CPUTIME_ID = 2
_SIGEV_SIGNAL = 0
# The soft stop's timers, by their signal: this process's (a fork's child has none of its
# parent's timers, so it forgets theirs; a replay sets them at every recorded step, where
# asking the process's id each time was a system call more through the filter).
_timers: dict[int, ctypes.c_void_p] = {}
os.register_at_fork(after_in_child=_timers.clear)


def _timespec(seconds: float) -> _TimeSpec:
    whole = int(seconds)
    return _TimeSpec(whole, round((seconds - whole) * 1e9))


def _timer(signo: int) -> ctypes.c_void_p:
    """This process's CPU timer that sends ``signo``, made (unarmed) if it has none. Raises
    OSError."""
    timer = _timers.get(signo)
    if timer is None:
        event = _SigEvent(signo=signo, notify=_SIGEV_SIGNAL)
        timer = ctypes.c_void_p()
        if _libc.timer_create(_CLOCK_PROCESS_CPUTIME_ID, ctypes.byref(event), ctypes.byref(timer)):
            raise OSError(ctypes.get_errno(), f"timer_create: {os.strerror(ctypes.get_errno())}")
        _timers[signo] = timer
    return timer


def _set_timer(signo: int, seconds: float, interval: float = 0) -> None:
    """Send ``signo`` once this process has run ``seconds`` more of CPU (0: never), and each
    ``interval`` on. Raises OSError."""
    timer = _timers.get(signo)
    if timer is None:
        if not seconds:
            return
        timer = _timer(signo)
    both = _ITimerSpec(interval=_timespec(interval), value=_timespec(seconds))
    if _libc.timer_settime(timer, 0, ctypes.byref(both), None):
        raise OSError(ctypes.get_errno(), f"timer_settime: {os.strerror(ctypes.get_errno())}")


# How often a soft stop's SIGPROF comes once the allowance is spent (a tick, in effect).
_AGAIN_S = 0.001
# The SIGPROF handler stop_softly set (None: SIGPROF ends the process).
_soft_stop: Callable[[int, FrameType | None], object] | None = None


def stop_softly(handler: Callable[[int, FrameType | None], object]) -> None:
    """From the next :func:`tighten` or :func:`rearm` on, a spent CPU allowance calls
    ``handler`` (SIGPROF's, a Python signal handler) rather than ending the process, so the
    run can end itself and say what it printed; another then ends it with SIGVTALRM, at its
    default action, :func:`hard_stop_ms` of CPU later (both ``timer_create`` timers on the
    CPU the process is charged, user and system; an allowance with no room for that is
    ended by ITIMER_PROF's SIGPROF as without a handler). A Python handler
    runs between bytecodes only: a process stuck in one call into C code (a sort, a regular
    expression, a loop of allocations that is mostly the kernel's time) meets that hard
    stop, and so does one whose handler does not end it. Once the allowance is spent, SIGPROF
    comes again each millisecond of CPU until the process ends (or the next allowance)."""
    global _soft_stop
    _soft_stop = handler


# What _arm last set SIGPROF's action to in this process (see _arm's ``first``).
_prof_action: object = None


def _arm(compute_ms: int, *, first: bool = True) -> None:
    """Arm the CPU timers for ``compute_ms``; ``first``: the process's first arming since
    it was given the script, which also sets what the signals do; a segment after it
    (:func:`rearm`) sets SIGPROF's action again only if it changes (a segment with no room
    for a soft stop): a replay re-arms at every recorded step, and each signal's action
    set is a system call through the filter and an enum's conversion (about 3 us: the
    three of them made a thousand recorded calls 5 ms slower to replay)."""
    global _prof_action
    seconds = compute_ms / 1000
    hard_ms = hard_stop_ms(compute_ms)
    soft = _soft_stop if hard_ms else None
    action = signal.SIG_DFL if soft is None else soft
    try:
        # A parent may have left these ignored (an ignored disposition survives exec) or
        # blocked; either would turn the CPU limit off.
        if first or action is not _prof_action:
            signal.signal(signal.SIGPROF, action)
            _prof_action = action
        if first:
            for sig in (signal.SIGXCPU, signal.SIGVTALRM):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(
                signal.SIG_UNBLOCK, {signal.SIGPROF, signal.SIGXCPU, signal.SIGVTALRM}
            )
        if soft is not None:
            # On the clock the process is charged by: SIGPROF at the allowance, and each
            # millisecond on (a handler that cannot run, as Python cannot call it in a script
            # at its recursion bound, is called again once the script has unwound a frame);
            # SIGVTALRM a little later ends the process.
            signal.setitimer(signal.ITIMER_PROF, 0)
            _set_timer(signal.SIGPROF, seconds, _AGAIN_S)
            _set_timer(signal.SIGVTALRM, seconds + hard_ms / 1000)
            return
        for signo in (signal.SIGPROF, signal.SIGVTALRM):
            _set_timer(signo, 0)
        signal.setitimer(signal.ITIMER_PROF, seconds)
        # The kernel rounds a CPU timer up by a tick (4 ms at 250 Hz): armed again that much
        # early, it fires at the allowance, not a tick past it (compute_ms = 100, 20 runs: the
        # CPU charged, which includes the ended process's exit, was 104 to 110 ms, median
        # 106.5; now 98 to 108, median 103).
        early = signal.getitimer(signal.ITIMER_PROF)[0] - seconds
        if early > 0:
            signal.setitimer(signal.ITIMER_PROF, max(seconds - early, seconds / 2))
        armed = signal.getitimer(signal.ITIMER_PROF)[0] > 0
    except (OSError, ValueError, OverflowError) as e:
        raise LockdownError("arm", f"cannot arm the CPU timer for {compute_ms} ms: {e}") from e
    if not armed:
        raise LockdownError("arm", "ITIMER_PROF did not arm")


def batch_scheduling() -> None:
    """Run this process under ``SCHED_BATCH``: the kernel then never lets it preempt a
    normal task when it wakes, so the host's event loop is not put off the CPU each time
    it hands the sandbox a script or results, or ends it (measured on 2 vCPUs: ending a
    live process that had been woken on the host's CPU kept the host off it for up to
    2.9 ms of its kill call while the process was torn down; under ``SCHED_BATCH``, 0.06 ms
    at most). The process still gets its fair share of the CPU. A hint, not a limit: a
    kernel or container that refuses it leaves the process as it was."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def prepare() -> None:
    """Warm what :func:`apply` looks up (the ``nobody`` ids), e.g. once in a fork server."""
    _nobody()


# --- 0. preflight --------------------------------------------------------------------------


@functools.cache
def _nobody() -> tuple[int, int]:
    """The uid and gid of ``nobody``: looked up while files can still be read."""
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return NOBODY_FALLBACK, NOBODY_FALLBACK
    return entry.pw_uid, entry.pw_gid


def _check_single_threaded() -> None:
    """One thread: a seccomp filter binds only the thread that loads it (and its children)."""
    try:
        tasks = len(os.listdir("/proc/self/task"))  # sees C threads too
    except OSError:
        tasks = 1  # no /proc: only Python's own count below is available
    count = max(tasks, threading.active_count())
    if count != 1:
        raise LockdownError(
            "threads",
            f"the process has {count} threads; it must be single-threaded "
            "(import _quickjs, not quickjs, which starts a thread)",
        )


def _check_bpf(bpf: bytes) -> None:
    if not isinstance(bpf, bytes | bytearray) or not bpf or len(bpf) % _BPF_INSN:
        raise LockdownError("seccomp", "filter_bpf is not a classic BPF program")
    if len(bpf) // _BPF_INSN > _BPF_MAXINSNS:
        raise LockdownError(
            "seccomp", f"filter_bpf has {len(bpf) // _BPF_INSN} instructions, over 4096"
        )


# --- 1. fds --------------------------------------------------------------------------------


def _close_fds() -> None:
    """Close every fd but 0, 1 and 2, so nothing inherited stays reachable."""
    if _libc.syscall(_SYS_CLOSE_RANGE, 3, ctypes.c_uint(_LOW32), 0) == 0:
        return
    err = ctypes.get_errno()
    if err not in (errno.ENOSYS, errno.EINVAL):
        raise LockdownError("fds", f"close_range: {os.strerror(err)}")
    # Before Linux 5.9: close what /proc lists (read before anything is locked down).
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError as e:
        raise LockdownError("fds", f"no close_range and cannot list /proc/self/fd: {e}") from e
    for fd in fds:
        if fd > 2:
            try:
                os.close(fd)
            except OSError as e:
                if e.errno != errno.EBADF:  # the listing's own fd is already closed
                    raise LockdownError("fds", f"cannot close fd {fd}: {e}") from e


def _check_stdio() -> None:
    """0, 1 and 2 must be open and be pipes, sockets or /dev/null-like devices."""
    for fd, name in _STDIO:
        try:
            mode = os.fstat(fd).st_mode
        except OSError as e:
            raise LockdownError("fds", f"{name} is not open: {e.strerror}") from e
        if os.isatty(fd):
            raise LockdownError(
                "fds", f"{name} is a terminal: the sandbox speaks JSON lines over pipes"
            )
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            raise LockdownError(
                "fds",
                f"{name} is not a pipe, socket or /dev/null: the sandbox speaks JSON lines "
                "over pipes (and cannot write files)",
            )


# --- 2. environment ------------------------------------------------------------------------


def _clear_environment() -> None:
    """Unset every variable (the original text leaves only if the process started empty)."""
    os.environ.clear()
    if os.environ:
        raise LockdownError("environment", f"{len(os.environ)} variables remain set")


# --- 3. rlimits ----------------------------------------------------------------------------


def heap_limit(memory: int, data_limit: int | None, room: int = 0) -> int:
    """The process heap (``RLIMIT_DATA``) for a JS heap of ``memory``: ``data_limit`` or
    ``protocol.process_heap(memory)``, plus ``room``."""
    base = data_limit if data_limit is not None else protocol.process_heap(memory)
    return base + room


def _set_rlimits(*, memory: int, data_limit: int | None, cpu_seconds: int, room: int) -> None:
    """Set every limit; as root this also fixes the hard limits the process keeps."""
    data = heap_limit(memory, data_limit, room)
    limits = (
        # CPU backstop; tighten() lowers it to the script's allowance.
        ("RLIMIT_CPU", resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1),
        # The process heap: brk and private writable mappings, Python's and QuickJS's.
        ("RLIMIT_DATA", resource.RLIMIT_DATA, data, data),
        # Bounds the main thread's stack growth, checked at each fault, so setting it now
        # applies (the mmap base left at least 128 MiB of room below the stack at exec).
        ("RLIMIT_STACK", resource.RLIMIT_STACK, STACK_BYTES, STACK_BYTES),
        ("RLIMIT_NOFILE", resource.RLIMIT_NOFILE, NOFILE, NOFILE),
        # No process or thread can be created (enforced once the uid is not root).
        ("RLIMIT_NPROC", resource.RLIMIT_NPROC, 0, 0),
        ("RLIMIT_CORE", resource.RLIMIT_CORE, 0, 0),
        # No file can grow (writes to pipes are not affected).
        ("RLIMIT_FSIZE", resource.RLIMIT_FSIZE, 0, 0),
        ("RLIMIT_MEMLOCK", resource.RLIMIT_MEMLOCK, 0, 0),
        ("RLIMIT_MSGQUEUE", resource.RLIMIT_MSGQUEUE, 0, 0),
        ("RLIMIT_RTPRIO", resource.RLIMIT_RTPRIO, 0, 0),
    )
    for name, which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as e:
            raise LockdownError(
                f"rlimit {name}", f"cannot set {name} to soft={soft} hard={hard}: {e}"
            ) from e


def _lower(name: str, which: int, soft: int, hard: int) -> None:
    """Set a limit to at most ``soft``/``hard``, never raising either."""

    def at_most(value: int, current: int) -> int:
        return value if current == resource.RLIM_INFINITY else min(value, current)

    try:
        cur_soft, cur_hard = resource.getrlimit(which)
        new_hard = at_most(hard, cur_hard)
        new_soft = min(at_most(soft, cur_soft), new_hard)
        resource.setrlimit(which, (new_soft, new_hard))
    except (OSError, ValueError) as e:
        raise LockdownError(
            f"tighten {name}", f"cannot lower {name} to soft={soft} hard={hard}: {e}"
        ) from e


# --- 4. identity ---------------------------------------------------------------------------


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _capabilities() -> int:
    """The union of the effective and permitted capability sets (0 when none)."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise LockdownError("identity", f"capget: {os.strerror(ctypes.get_errno())}")
    caps = 0
    for i, word in enumerate(data):
        caps |= (word.effective | word.permitted) << (32 * i)
    return caps


def _drop_privileges(uid: int, gid: int) -> None:
    """As root: drop to ``nobody``; in every case prove no privilege is left."""
    if 0 in os.getresuid():
        for what, call in (
            ("setgroups([])", lambda: os.setgroups([])),
            (f"setresgid({gid})", lambda: os.setresgid(gid, gid, gid)),
            (f"setresuid({uid})", lambda: os.setresuid(uid, uid, uid)),
        ):
            try:
                call()
            except OSError as e:
                raise LockdownError("identity", f"{what} failed: {e}") from e
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
            raise LockdownError(
                "identity",
                f"ids are {os.getresuid()}/{os.getresgid()}, not nobody's {uid}/{gid}",
            )
        if os.getgroups():
            raise LockdownError("identity", f"supplementary groups remain: {os.getgroups()}")
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise LockdownError("identity", "setuid(0) succeeded: uid 0 can be regained")
    caps = _capabilities()
    if caps:
        raise LockdownError("identity", f"the process still holds capabilities {caps:#x}")


# --- 5. prctl ------------------------------------------------------------------------------


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    """prctl with all five arguments passed: options such as PR_SET_NO_NEW_PRIVS fail with
    EINVAL when an unused one is not zero, and an argument left out is whatever the
    register held."""
    zero = ctypes.c_ulong(0)
    result = _libc.prctl(
        ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), zero, zero
    )
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def _set_process_flags(parent: int) -> None:
    """Not dumpable (no core, no ptrace by peers, /proc/<pid> owned by root), no new
    privileges (no exec can gain any; also what lets an unprivileged process load seccomp),
    and killed when its parent (``parent``, the runner or its fork server) ends: a live
    process stopped while it waits would otherwise outlive them both, stopped for ever. Set
    after the identity changes, which clear it."""
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # it ended before the flag was set
            raise LockdownError("prctl", "its parent ended before the process was confined")
        _prctl(_PR_SET_DUMPABLE, 0)
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        dumpable = _prctl(_PR_GET_DUMPABLE)
        no_new_privs = _prctl(_PR_GET_NO_NEW_PRIVS)
    except OSError as e:
        raise LockdownError("prctl", str(e)) from e
    if dumpable != 0 or no_new_privs != 1:
        raise LockdownError("prctl", f"dumpable={dumpable}, no_new_privs={no_new_privs}")


# --- 6. seccomp ----------------------------------------------------------------------------


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _load_seccomp(bpf: bytes) -> None:
    """Load the filter with prctl(PR_SET_SECCOMP): from here on, the allowlist rules."""
    program = ctypes.create_string_buffer(bytes(bpf), len(bpf))
    fprog = _SockFprog(len(bpf) // _BPF_INSN, ctypes.addressof(program))
    try:
        _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
    except OSError as e:
        raise LockdownError("seccomp", f"PR_SET_SECCOMP: {e.strerror}") from e
    # Our filter answers prctl with EPERM; a filter that allows it reports mode 2.
    try:
        mode = _prctl(_PR_GET_SECCOMP)
    except OSError as e:
        if e.errno != errno.EPERM:
            raise LockdownError("seccomp", f"PR_GET_SECCOMP: {e.strerror}") from e
        mode = _SECCOMP_MODE_FILTER
    if mode != _SECCOMP_MODE_FILTER:
        raise LockdownError("seccomp", f"the filter is not in force (PR_GET_SECCOMP={mode})")


# --- the filter ----------------------------------------------------------------------------

# Allowed whatever the arguments. Nothing here creates an fd, a process, a mapping that can
# run code, or reaches a path.
_ALLOW = (
    # The pipes: stdin, stdout, stderr (no call here can open another fd).
    "read",  # the script line and file bytes
    "write",  # ready, read requests, ran
    "readv",
    "writev",
    "lseek",  # io probes seekable() (ESPIPE on a pipe)
    "fstat",  # the raw fstat call; glibc's own fstat goes through newfstatat (EACCES)
    "close",
    # Memory: the heap grows with brk, large blocks with mmap/mremap, free gives back.
    "brk",
    "munmap",
    "mremap",  # cannot add PROT_EXEC
    "madvise",  # malloc trims with MADV_DONTNEED
    # Signals: Python installs handlers and masks; SIGPROF, SIGVTALRM and SIGXCPU stop the
    # process's CPU (see tighten and stop_softly).
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",  # faulthandler
    "restart_syscall",
    # Who am I: harmless reads of the process's own ids.
    "getpid",
    "gettid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getresuid",
    "getresgid",
    # CPU accounting and the CPU allowance (ITIMER_PROF, or a soft stop's two CPU timers, set
    # by tighten()).
    "getrusage",
    "getitimer",
    "setitimer",
    "timer_create",
    "timer_settime",
    # Own limits; the kernel refuses to raise a hard limit without privilege.
    "getrlimit",
    "setrlimit",
    "sched_yield",  # glibc lock back-off
    "getrandom",  # os.urandom, hash seeds, random
    "exit",
    "exit_group",
)

# Called by Python or glibc when they probe a path (imports, isatty, getcwd): answered with
# an error so Python fails cleanly instead of the process dying.
_ERRNO = (
    ("ioctl", errno.ENOTTY),  # isatty() probes with TCGETS: "not a terminal"
    ("prctl", errno.EPERM),
    ("getcwd", errno.ENOENT),  # importlib treats ENOENT from getcwd as "no cwd"
    *(
        (name, errno.EACCES)
        for name in (
            "open",
            "openat",
            "openat2",
            "creat",
            "stat",
            "lstat",
            "newfstatat",  # also glibc's fstat(fd); the path cannot be told apart
            "statx",
            "access",
            "faccessat",
            "faccessat2",
            "readlink",
            "readlinkat",
        )
    ),
)


def _resolve(name: str) -> int | None:
    """The native number of a syscall, or None when this architecture has no such call."""
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    return number if number >= 0 else None


def _add(flt: pyseccomp.SyscallFilter, action: int, name: str, *args: pyseccomp.Arg) -> None:
    number = _resolve(name)
    if number is not None:
        flt.add_rule(action, number, *args)


def _add_each(
    flt: pyseccomp.SyscallFilter, name: str, arg: int, values: Iterable[int], mask: int = _LOW32
) -> None:
    """Allow ``name`` when argument ``arg`` (masked) is one of ``values``."""
    for value in values:
        _add(flt, pyseccomp.ALLOW, name, pyseccomp.Arg(arg, pyseccomp.MASKED_EQ, mask, value))


def build_filter(*, arch: int | None = None) -> pyseccomp.SyscallFilter:
    """The seccomp filter :func:`apply` loads, built with libseccomp.

    Default action and bad-architecture action are ``KILL_PROCESS`` (pyseccomp's ``KILL``
    kills only the thread). Only the native architecture is in the filter, so i386 calls on
    x86_64 are killed as a bad architecture, and x32 calls (number | 0x40000000) match no
    rule and are killed. ``arch`` builds for another architecture instead (for tests);
    syscall names the native architecture lacks are left out, which kills them.
    """
    try:
        flt = pyseccomp.SyscallFilter(pyseccomp.KILL_PROCESS)
        flt.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)
        if arch is not None and arch != pyseccomp.system_arch():
            flt.add_arch(arch)
            flt.remove_arch(pyseccomp.Arch.NATIVE)

        for name in _ALLOW:
            _add(flt, pyseccomp.ALLOW, name)

        # Memory that can never run code: no PROT_EXEC, and mmap only anonymous memory.
        no_exec = pyseccomp.Arg(2, pyseccomp.MASKED_EQ, _PROT_EXEC, 0)
        anonymous = pyseccomp.Arg(3, pyseccomp.MASKED_EQ, _MAP_ANONYMOUS, _MAP_ANONYMOUS)
        _add(flt, pyseccomp.ALLOW, "mmap", no_exec, anonymous)
        _add(flt, pyseccomp.ALLOW, "mprotect", no_exec)

        # Futexes as glibc's locks use them (private or shared, either clock), no PI or
        # requeue. The process has one thread, so these are rare.
        futex_mask = _LOW32 & ~(_FUTEX_PRIVATE_FLAG | _FUTEX_CLOCK_REALTIME)
        _add_each(flt, "futex", 1, _FUTEX_OPS.values(), futex_mask)

        # This process's clocks and the system's; not another process's CPU clock.
        _add_each(flt, "clock_gettime", 0, _CLOCKS.values())
        _add_each(flt, "clock_getres", 0, _CLOCKS.values())

        # getrlimit/setrlimit go through prlimit64 in glibc: only for this process (pid 0).
        _add(flt, pyseccomp.ALLOW, "prlimit64", pyseccomp.Arg(0, pyseccomp.EQ, 0))

        # Flags of fds it has (os.set_blocking, set_inheritable); not F_DUPFD, which makes fds.
        _add_each(flt, "fcntl", 1, _FCNTL_CMDS.values())

        for name, err in _ERRNO:
            _add(flt, pyseccomp.ERRNO(err), name)
    except OSError as e:
        raise LockdownError("seccomp", f"cannot build the filter: {e}") from e
    return flt


def export_bpf(flt: pyseccomp.SyscallFilter | None = None) -> bytes:
    """The filter (default: a new :func:`build_filter`) as classic BPF for ``apply``."""
    if flt is None:
        flt = build_filter()
    try:
        fd = os.memfd_create("lockdown-bpf", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        import tempfile  # only without memfd_create

        with tempfile.TemporaryFile() as file:
            return _export_to(flt, file.fileno())
    try:
        return _export_to(flt, fd)
    finally:
        os.close(fd)


def _export_to(flt: pyseccomp.SyscallFilter, fd: int) -> bytes:
    class _File:
        def fileno(self) -> int:
            return fd

    try:
        flt.export_bpf(_File())
        size = os.lseek(fd, 0, os.SEEK_END)
        return os.pread(fd, size, 0)
    except OSError as e:
        raise LockdownError("seccomp", f"cannot export the filter: {e}") from e
