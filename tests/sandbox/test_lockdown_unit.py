"""The seccomp policy of ``sandbox.lockdown``, checked on the exported BPF itself.

A small classic-BPF interpreter runs the filter on made-up ``seccomp_data`` (syscall number,
architecture, arguments), so the policy is checked call by call, for every architecture and
argument, without loading it: nothing here confines the test process.
"""

from __future__ import annotations

import errno
import json
import signal
import struct
import subprocess
import sys
import textwrap

import pytest

pyseccomp = pytest.importorskip("pyseccomp", reason="needs pyseccomp and libseccomp.so.2")

from sandbox import lockdown  # noqa: E402  (after the skip: importing it imports pyseccomp)

ALLOW = 0x7FFF0000
KILL_PROCESS = 0x80000000
AUDIT_ARCH_I386 = 0x40000003
X32_BIT = 0x40000000
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20


def errno_action(code: int) -> int:
    return 0x00050000 | code


def run_bpf(program: bytes, nr: int, args: tuple[int, ...] = (), arch: int | None = None) -> int:
    """Run a seccomp classic-BPF program on one syscall; the action it returns."""
    arch = pyseccomp.Arch.X86_64 if arch is None else arch
    full = (*args, *(0,) * (6 - len(args)))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(a & (2**64 - 1) for a in full))
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    a = x = 0
    mem = [0] * 16
    pc = 0
    for _ in range(len(insns) + 1):  # classic BPF only jumps forward
        code, jt, jf, k = insns[pc]
        pc += 1
        cls = code & 0x07
        if code == 0x20:  # ld [k]
            a = struct.unpack_from("<I", data, k)[0]
        elif code == 0x60:  # ld M[k]
            a = mem[k]
        elif code == 0x61:  # ldx M[k]
            x = mem[k]
        elif code == 0x02:  # st M[k]
            mem[k] = a
        elif code == 0x03:  # stx M[k]
            mem[k] = x
        elif code == 0x07:  # tax
            x = a
        elif code == 0x87:  # txa
            a = x
        elif code == 0x00:  # ld #k
            a = k
        elif code == 0x54:  # and #k
            a &= k
        elif code == 0x44:  # or #k
            a |= k
        elif code == 0x06:  # ret #k
            return k
        elif code == 0x16:  # ret a
            return a
        elif cls == 0x05:  # jumps
            op, src = code & 0xF0, x if code & 0x08 else k
            if op == 0x00:
                pc += k
                continue
            taken = {0x10: a == src, 0x20: a > src, 0x30: a >= src, 0x40: bool(a & src)}[op]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected BPF instruction {code:#x}")
    raise AssertionError("the program did not return")


@pytest.fixture(scope="module")
def bpf() -> bytes:
    return lockdown.export_bpf()


def nr(name: str, arch: int = 0) -> int:
    number = pyseccomp.resolve_syscall(arch, name)
    if number < 0:
        pytest.skip(f"no {name} on this architecture")
    return number


needs_x86_64 = pytest.mark.skipif(
    pyseccomp.system_arch() != pyseccomp.Arch.X86_64, reason="x86_64 syscall layout"
)

# A word list reads better than 130 quoted names.
FORBIDDEN = """
    socket connect bind listen accept accept4 sendto recvfrom sendmsg recvmsg socketpair
    clone clone3 fork vfork execve execveat ptrace kill tkill tgkill rt_sigqueueinfo
    io_uring_setup io_uring_enter io_uring_register bpf userfaultfd memfd_create personality
    unshare setns mount umount2 pivot_root chroot chdir fchdir setuid setgid setreuid
    setregid setresuid setresgid setgroups setfsuid setfsgid capset keyctl add_key request_key
    perf_event_open process_vm_readv process_vm_writev seccomp mknod mkdir unlink rename
    symlink link chmod chown truncate dup dup2 dup3 pipe pipe2 eventfd2 epoll_create1
    signalfd4 timerfd_create inotify_init1 fanotify_init open_by_handle_at name_to_handle_at
    shmget shmat msgget semget mlock mlockall pkey_mprotect pkey_alloc remap_file_pages
    nanosleep clock_nanosleep sysinfo uname getppid getgroups kcmp pidfd_open pidfd_getfd
    pidfd_send_signal move_pages mbind set_mempolicy migrate_pages swapon reboot kexec_load
    init_module finit_module delete_module acct quotactl ioprio_set setpriority
    sched_setaffinity sched_setscheduler landlock_create_ruleset mincore getdents64
    getsockopt setsockopt modify_ldt arch_prctl iopl ioperm vmsplice splice tee sendfile
    select poll ppoll epoll_wait pause wait4 waitid
""".split()  # noqa: SIM905


@pytest.mark.parametrize("name", FORBIDDEN)
def test_forbidden_calls_kill_the_process(bpf: bytes, name: str) -> None:
    """Anything not allowed ends the process (KILL_PROCESS, not pyseccomp's kill-thread)."""
    assert run_bpf(bpf, nr(name)) == KILL_PROCESS


@pytest.mark.parametrize("name", lockdown._ALLOW)
def test_allowed_calls(bpf: bytes, name: str) -> None:
    """The unconditional allowlist, whatever the arguments."""
    assert run_bpf(bpf, nr(name), (7, 2**40, 3)) == ALLOW


@pytest.mark.parametrize(("name", "code"), lockdown._ERRNO)
def test_path_probes_get_an_errno(bpf: bytes, name: str, code: int) -> None:
    """open/stat/access/readlink get EACCES, ioctl ENOTTY, prctl EPERM, getcwd ENOENT."""
    assert run_bpf(bpf, nr(name)) == errno_action(code)


def test_mmap_never_executable(bpf: bytes) -> None:
    """mmap: anonymous read/write memory only; PROT_EXEC or a file mapping is killed."""
    rw, anon = PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
    mmap, mprotect = nr("mmap"), nr("mprotect")
    assert run_bpf(bpf, mmap, (0, 4096, rw, anon, 2**64 - 1, 0)) == ALLOW
    assert run_bpf(bpf, mmap, (0, 4096, rw | PROT_EXEC, anon, 2**64 - 1, 0)) == KILL_PROCESS
    assert run_bpf(bpf, mmap, (0, 4096, PROT_READ, MAP_PRIVATE, 0, 0)) == KILL_PROCESS
    assert run_bpf(bpf, mprotect, (4096, 4096, rw)) == ALLOW
    assert run_bpf(bpf, mprotect, (4096, 4096, PROT_READ | PROT_EXEC)) == KILL_PROCESS
    assert run_bpf(bpf, mprotect, (4096, 4096, PROT_EXEC)) == KILL_PROCESS


@pytest.mark.parametrize(
    ("op", "action"),
    [
        (0 | 128, ALLOW),  # FUTEX_WAIT_PRIVATE
        (1 | 128, ALLOW),  # FUTEX_WAKE_PRIVATE
        (0, ALLOW),  # FUTEX_WAIT (shared)
        (9 | 128 | 256, ALLOW),  # FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME
        (10 | 128, ALLOW),  # FUTEX_WAKE_BITSET_PRIVATE
        (3, KILL_PROCESS),  # FUTEX_REQUEUE
        (4 | 128, KILL_PROCESS),  # FUTEX_CMP_REQUEUE_PRIVATE
        (5 | 128, KILL_PROCESS),  # FUTEX_WAKE_OP_PRIVATE
        (6, KILL_PROCESS),  # FUTEX_LOCK_PI
        (11, KILL_PROCESS),  # FUTEX_WAIT_REQUEUE_PI
        (13, KILL_PROCESS),  # FUTEX_LOCK_PI2
    ],
)
def test_futex_ops(bpf: bytes, op: int, action: int) -> None:
    """futex: the wait/wake ops glibc's locks use; no PI, no requeue."""
    assert run_bpf(bpf, nr("futex"), (4096, op, 1)) == action


@pytest.mark.parametrize("name", ["clock_gettime", "clock_getres"])
def test_clock_ids(bpf: bytes, name: str) -> None:
    """Clocks of this process and of the system; not alarms, not another process's CPU."""
    for clock in range(8):
        assert run_bpf(bpf, nr(name), (clock, 4096)) == ALLOW, clock
    pid1_cpu = (~1 << 3) | 2  # MAKE_PROCESS_CPUCLOCK(1, CPUCLOCK_SCHED)
    for clock in (8, 9, 11, pid1_cpu):
        assert run_bpf(bpf, nr(name), (clock, 4096)) == KILL_PROCESS, clock


def test_prlimit_only_own_process(bpf: bytes) -> None:
    """prlimit64 on pid 0 (this process) only."""
    assert run_bpf(bpf, nr("prlimit64"), (0, 7, 4096, 0)) == ALLOW
    assert run_bpf(bpf, nr("prlimit64"), (1, 7, 4096, 0)) == KILL_PROCESS


def test_fcntl_flags_only(bpf: bytes) -> None:
    """fcntl: get/set fd and file flags; F_DUPFD and the rest are killed."""
    for cmd in (1, 2, 3, 4):
        assert run_bpf(bpf, nr("fcntl"), (1, cmd, 0)) == ALLOW
    for cmd in (0, 1030, 5, 6, 8, 1024):  # DUPFD, DUPFD_CLOEXEC, GETLK, SETLK, SETOWN, SETLEASE
        assert run_bpf(bpf, nr("fcntl"), (1, cmd, 0)) == KILL_PROCESS


@needs_x86_64
def test_other_abis_are_killed(bpf: bytes) -> None:
    """i386 (int 0x80) is a bad architecture; x32 numbers (nr | 0x40000000) are killed even
    for calls the native filter allows."""
    for number in (0, 1, 3, 20, 39, 231):
        assert run_bpf(bpf, number, arch=AUDIT_ARCH_I386) == KILL_PROCESS
        assert run_bpf(bpf, X32_BIT | number) == KILL_PROCESS
    assert run_bpf(bpf, X32_BIT | 2) == KILL_PROCESS  # x32 open: killed, not EACCES
    assert run_bpf(bpf, 0, arch=pyseccomp.Arch.AARCH64) == KILL_PROCESS


def test_aarch64_filter_builds() -> None:
    """Built for aarch64 (whose syscalls differ: no open, stat, fork...), the filter still
    builds and keeps the policy under aarch64's numbers."""
    arm = pyseccomp.Arch.AARCH64
    program = lockdown.export_bpf(lockdown.build_filter(arch=arm))

    def on_arm(name: str, *args: int) -> int:
        return run_bpf(program, pyseccomp.resolve_syscall(arm, name), args, arch=arm)

    assert on_arm("read") == ALLOW
    assert on_arm("openat") == errno_action(errno.EACCES)
    assert on_arm("clone") == KILL_PROCESS
    assert on_arm("execve") == KILL_PROCESS
    assert on_arm("mmap", 0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS) == ALLOW
    assert on_arm("mmap", 0, 4096, PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS) == KILL_PROCESS
    assert run_bpf(program, 0, arch=pyseccomp.Arch.X86_64) == KILL_PROCESS


def test_export_is_classic_bpf(bpf: bytes) -> None:
    """Whole 8-byte instructions, within the kernel's 4096, the same every time."""
    assert len(bpf) % 8 == 0
    assert 0 < len(bpf) // 8 <= 4096
    assert lockdown.export_bpf() == bpf


def test_lockdown_error_names_the_step() -> None:
    error = lockdown.LockdownError("rlimit RLIMIT_DATA", "cannot set it")
    assert error.step == "rlimit RLIMIT_DATA"
    assert "rlimit RLIMIT_DATA" in str(error) and "cannot set it" in str(error)


@pytest.mark.parametrize("program", [b"", b"1234567", b"\0" * 8 * 4097])
def test_apply_rejects_bad_bpf_before_changing_anything(program: bytes) -> None:
    """A malformed filter_bpf fails at once (this test process stays as it was)."""
    with pytest.raises(lockdown.LockdownError) as info:
        lockdown.apply(filter_bpf=program)
    assert info.value.step == "seccomp"


def test_tighten_rejects_zero_compute() -> None:
    with pytest.raises(lockdown.LockdownError) as info:
        lockdown.tighten(compute_ms=0, memory=1 << 20)
    assert info.value.step == "tighten"


@pytest.mark.parametrize("compute_ms", [100, 5000, 37])
def test_the_cpu_timer_is_armed_for_the_allowance(compute_ms: int) -> None:
    """The kernel rounds ITIMER_PROF up by a tick; the timer is armed so that what it holds
    is the allowance, not a tick more. (In a process of its own: the timer's SIGPROF ends the
    process it fires in.) Read back at once, several times: a tick of the kernel that lands
    between the arming and the reading takes a whole tick off what is read (CI read 96.001 ms
    of 100 once), so the closest reading is held to the allowance, and none may pass it."""
    code = (
        "import signal; from sandbox import lockdown\n"
        "for _ in range(5):\n"
        f"    lockdown._arm({compute_ms})\n"
        "    print(signal.setitimer(signal.ITIMER_PROF, 0)[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    readings = [float(line) * 1000 for line in out.stdout.split()]
    assert len(readings) == 5 and max(readings) <= compute_ms + 0.1, readings
    assert compute_ms - 1 <= max(readings), readings


def test_rehearse_changes_no_limit_and_leaves_no_timer() -> None:
    """After the limits apply() sets, rehearse() goes through tighten and changes nothing:
    every limit is as it was and no CPU timer is armed; the soft stop's two timers are made,
    unarmed, for the step's tighten to arm. (In a process of its own: the limits are only
    ever lowered.)"""
    code = textwrap.dedent(
        """
        import ctypes, json, resource, signal
        from sandbox import lockdown
        lockdown._set_rlimits(memory=64 << 20, data_limit=None, cpu_seconds=600, room=0)
        names = [n for n in dir(resource) if n.startswith("RLIMIT_")]
        before = {n: resource.getrlimit(getattr(resource, n)) for n in names}
        lockdown.rehearse()
        after = {n: resource.getrlimit(getattr(resource, n)) for n in names}
        armed = {}
        for signo, timer in lockdown._timers.items():
            spec = lockdown._ITimerSpec()
            assert lockdown._libc.timer_gettime(timer, ctypes.byref(spec)) == 0
            armed[int(signo)] = [spec.value.sec, spec.value.nsec]
        print(json.dumps([before, after, signal.getitimer(signal.ITIMER_PROF), armed]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, timer, armed = json.loads(out.stdout)
    assert after == before
    assert before["RLIMIT_CPU"] == [600, 601]
    assert timer == [0.0, 0.0]
    assert armed == {str(int(s)): [0, 0] for s in (signal.SIGPROF, signal.SIGVTALRM)}
