"""``codemode runner serve``: run a runner service until SIGTERM.

    python -m runner.service_main --listen 0.0.0.0:7300 --token-file /etc/codemode/runner.token

The first line on stdout is ``listening on HOST:PORT`` with the bound address (port 0 picks a
free port). SIGTERM or SIGINT drains the service: it takes no new step, finishes the steps in
flight, and exits 0; a second signal stops it at once, abandoning the steps in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import logging
import math
import os
import resource
import signal
import ssl
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from runner import _wire as wire
from runner._base import SANDBOX_ENV, SANDBOX_FLAGS, sandbox_python
from runner._remote import TOKEN_ENV, read_token
from runner._service import (
    HANDSHAKE_TIMEOUT,
    HEARTBEAT,
    IDLE_TIMEOUT,
    LIVE_WAIT,
    MIN_HEARTBEAT,
    READ_TIMEOUT,
    SLOT_WAIT,
    RunnerService,
)
from runner._slots import default_slot_count
from runner.sizes import parse_size

if TYPE_CHECKING:
    from runner._process import ProcessRunner

MIN_TOKEN = 16


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line naming it and where help is (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a level; use one of {', '.join(LOG_LEVELS)}"
        )
    return text.upper()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return value


def _positive_seconds(text: str) -> float:
    # 0 would not mean "no timeout" but "none at all": every client dropped at once.
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, 0 or more")
    return value


def _size(option: str) -> Callable[[str], int]:
    """Bytes from ``option``'s value, a number or a size word such as ``2gb``."""

    def parse(text: str) -> int:
        try:
            return parse_size(text, what=option)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="codemode runner serve",
        description="Take script steps over TCP and run them in local confined processes.",
    )
    parser.add_argument(
        "--listen", required=True, metavar="HOST:PORT", help="address to listen on (port 0: any)"
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"file holding the shared token (default: the environment variable {TOKEN_ENV})",
    )
    parser.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="accept every client without a token (only on a network you fully trust)",
    )
    parser.add_argument("--cert", metavar="PEM", help="TLS certificate chain (with --key)")
    parser.add_argument("--key", metavar="PEM", help="TLS private key (with --cert)")
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help="steps run at once (default: $CODEMODE_SANDBOX_SLOTS or the CPU count, 2 to 8)",
    )
    parser.add_argument(
        "--slot-wait",
        type=_seconds,
        default=SLOT_WAIT,
        help=f"seconds a step waits for a slot before the answer is busy (default {SLOT_WAIT:g})",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the Python that runs the sandbox, with this project installed (default: this one)",
    )
    parser.add_argument(
        "--handshake-timeout",
        type=_positive_seconds,
        default=HANDSHAKE_TIMEOUT,
        help="seconds a new connection has for TLS and its hello (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_positive_seconds,
        default=IDLE_TIMEOUT,
        help="seconds a welcomed connection may send nothing between requests before it is "
        "closed (default: %(default)s)",
    )
    parser.add_argument(
        "--read-timeout",
        type=_positive_seconds,
        default=READ_TIMEOUT,
        help="seconds the engine has to answer a step's file read (default: %(default)s)",
    )
    parser.add_argument(
        "--heartbeat",
        type=_positive_seconds,
        default=HEARTBEAT,
        help=(
            f"seconds between beats to the client while a step runs (default {HEARTBEAT:g}, "
            f"at least {MIN_HEARTBEAT:g})"
        ),
    )
    parser.add_argument(
        "--live-wait",
        type=_seconds,
        default=LIVE_WAIT,
        help="seconds a live step's process may wait for its results before the service ends "
        f"it (default {LIVE_WAIT:g})",
    )
    parser.add_argument(
        "--live-max",
        type=_count,
        default=None,
        help="live processes waiting at once (default: sized for the machine; 0: keep none, "
        "every step replays)",
    )
    parser.add_argument(
        "--live-memory",
        type=_size("--live-memory"),
        default=None,
        help="bytes (or a size such as 2gb) the waiting live processes may hold together "
        "(default: a quarter of the memory free at start; 0: keep none, every step replays)",
    )
    parser.add_argument(
        "--line-memory",
        type=_size("--line-memory"),
        default=None,
        metavar="SIZE",
        help="bytes (or a size such as 2gb) the script and results lines being read may hold "
        "together, past the first 64 KiB of each (and what decoding them takes); a line that "
        "would pass what is left of it is refused as busy, one that would pass all of it as "
        "unfit (default: an eighth of the machine's memory)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=_log_level,
        help=f"how much the service logs: {', '.join(LOG_LEVELS)} (default INFO)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (without the program name), serve until drained. Returns the exit code.

    Returns 2 with a message on stderr naming the remedy when the options are wrong: no token
    (and no ``--insecure-no-token``), a token shorter than 16 characters, half a TLS pair, a
    bad address (argparse's own errors and ``--help`` raise ``SystemExit`` as usual), or an
    address it cannot listen on (not this machine's, a port it may not take); 75 when the
    port is taken (another process listens there: a supervisor may start it again later);
    0 after a drain.
    """
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        host, port = wire.parse_address(args.listen)
        default_slot_count()  # a bad CODEMODE_SANDBOX_SLOTS is an option error
        token = _token(args)
        tls = _tls(args.cert, args.key)
        if args.slots is not None and args.slots < 1:
            raise ValueError(f"--slots must be at least 1, not {args.slots}")
        if not 0 < args.heartbeat <= wire.MAX_HEARTBEAT:
            raise ValueError(
                f"--heartbeat must be a positive number of seconds up to "
                f"{wire.MAX_HEARTBEAT:g}, not {args.heartbeat}"
            )
        if args.heartbeat < MIN_HEARTBEAT:
            raise ValueError(
                f"--heartbeat must be at least {MIN_HEARTBEAT:g} seconds, not {args.heartbeat:g}: "
                f"each step's engine is sent a beat that often (the default is {HEARTBEAT:g})"
            )
        if not 0 < args.live_wait <= wire.MAX_LIVE_WAIT:
            raise ValueError(
                f"--live-wait must be a positive number of seconds up to "
                f"{wire.MAX_LIVE_WAIT:g}, not {args.live_wait}"
            )
        try:
            # Found at start, not at each step ("could not start the fork server") while
            # its health check said it was well.
            args.python = sandbox_python(args.python)
        except ValueError:
            raise ValueError(f"--python {args.python} is not an executable file") from None
        _check_python(args.python)
        if args.slot_wait > wire.MAX_SLOT_WAIT:
            raise ValueError(
                f"--slot-wait must be at most {wire.MAX_SLOT_WAIT:g} seconds, not {args.slot_wait}"
            )
    except ValueError as e:
        print(f"codemode runner serve: {e}", file=sys.stderr)
        return 2
    if tls is None and not _loopback(host):
        logging.getLogger("codemode.runner.service").warning(
            "listening on %s without TLS: the token and scripts cross the network in the "
            "clear; give --cert and --key",
            host,
        )
    from runner._process import ProcessRunner

    _raise_open_files()
    slots = args.slots or default_slot_count()
    try:
        service = _service(args, token, tls, slots, ProcessRunner)
    except ValueError as e:
        print(f"codemode runner serve: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(service, host, port))
    except _CannotListen as e:
        print(f"codemode runner serve: cannot listen on {args.listen}: {e}", file=sys.stderr)
        return os.EX_TEMPFAIL if e.taken else 2
    return 0


class _CannotListen(Exception):
    """The service could not listen on its address; ``taken``: another process holds it."""

    def __init__(self, error: OSError) -> None:
        self.taken = error.errno == errno.EADDRINUSE
        if self.taken:
            why = "another process listens there; stop it, or give --listen another port"
        elif error.errno == errno.EADDRNOTAVAIL:
            why = (
                "no interface of this machine has that address; give one of its addresses, "
                "or 0.0.0.0"
            )
        elif error.errno == errno.EACCES:
            why = (
                "this user may not take that port (below 1024 needs "
                "CAP_NET_BIND_SERVICE); give a port from 1024 up"
            )
        else:
            why = "check the address"
        super().__init__(f"{error.strerror or error}; {why}")


# Where the soft limit on open files is raised to when the hard one is infinite: Linux's
# default ceiling (fs.nr_open).
OPEN_FILES_CEILING = 1 << 20


def _raise_open_files() -> None:
    """Raise this process's soft limit on open files to its hard limit, as servers do: the
    soft one (1,024 by default) holds about a hundred live processes and their connections.
    A limit that cannot be raised stays as it is (the service sizes itself to it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _service(
    args: argparse.Namespace,
    token: str | None,
    tls: ssl.SSLContext | None,
    slots: int,
    process_runner: type[ProcessRunner],
) -> RunnerService:
    return RunnerService(
        token,
        # As many slots as the service's, which are taken first: they never make it wait.
        runner=process_runner(python=args.python, slots=slots, script_wait=args.slot_wait),
        slots=slots,
        tls=tls,
        handshake_timeout=args.handshake_timeout,
        idle_timeout=args.idle_timeout,
        read_timeout=args.read_timeout,
        slot_wait=args.slot_wait,
        heartbeat=args.heartbeat,
        live_wait=args.live_wait,
        live_max=args.live_max,
        live_memory=args.live_memory,
        line_memory=args.line_memory,
    )


async def _serve(service: RunnerService, host: str, port: int) -> None:
    try:
        address = await service.start(host, port)
    except OSError as e:
        await service.runner.aclose()
        raise _CannotListen(e) from None
    tls = "TLS" if service.tls else "plain TCP"
    print(f"listening on {address}", flush=True)
    logging.getLogger("codemode.runner.service").info(
        "serving on %s (%s, %d slots)", address, tls, service.slots.count
    )
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        if not stopping:
            logging.getLogger("codemode.runner.service").info(
                "%s: draining", signal.Signals(signum).name
            )
            stopping.append(asyncio.create_task(service.drain()))
        else:
            logging.getLogger("codemode.runner.service").warning(
                "%s again: stopping now", signal.Signals(signum).name
            )
            stopping.append(asyncio.create_task(service.aclose()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    await service.wait_closed()
    await asyncio.gather(*stopping, return_exceptions=True)
    await service.runner.aclose()


def _token(args: argparse.Namespace) -> str | None:
    if args.insecure_no_token:
        if args.token_file or os.environ.get(TOKEN_ENV):
            raise ValueError("--insecure-no-token was given with a token; give one or the other")
        return None
    try:
        token = read_token(args.token_file, where="--token-file")
    except ValueError as e:
        raise ValueError(f"{e} (or pass --insecure-no-token on a network you fully trust)") from e
    if len(token) < MIN_TOKEN:
        raise ValueError(
            f"the token is {len(token)} characters, fewer than {MIN_TOKEN}; make a longer one "
            "with `openssl rand -hex 32`"
        )
    return token


def _check_python(python: str) -> None:
    """Raise ValueError unless ``python`` runs Python 3.11 or later and imports the sandbox
    as a runner starts it (an executable that is no Python, /bin/false, or a Python without
    this project, started a service that could never run a step)."""
    try:
        ran = subprocess.run(
            [
                python,
                *SANDBOX_FLAGS,
                "-c",
                "import sys, sandbox; print(sys.version_info >= (3, 11))",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            env=dict(SANDBOX_ENV),
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ValueError(f"--python {python} does not run: {e}") from None
    if ran.returncode != 0 or ran.stdout.strip() != "True":
        said = (ran.stderr.strip().splitlines() or [f"exit code {ran.returncode}"])[-1]
        if ran.returncode == 0:
            said = "it is older than 3.11, or no Python"
        raise ValueError(f"--python {python} is not a Python the sandbox can run ({said[:200]})")


def _tls(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("TLS needs both --cert and --key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"cannot load the TLS certificate {cert} and key {key}: {e}") from e
    return context


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


serve = main

if __name__ == "__main__":
    sys.exit(main())
