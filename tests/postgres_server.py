"""A throwaway PostgreSQL server for the tests: a new cluster in a temporary directory,
listening on 127.0.0.1 only, run as an unprivileged user, removed when stopped.

PostgreSQL refuses to run as root, so as root (CI) the cluster runs as the ``postgres`` user
the Debian package makes, or ``nobody``. The server binaries come from ``pg_config
--bindir``, the Debian layout (``/usr/lib/postgresql/<version>/bin``), or ``PATH``;
``make test`` installs the Debian package when none is found.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class PostgresUnavailable(Exception):
    """No PostgreSQL server binaries, or the throwaway server would not start; says why."""


def _bindir() -> Path | None:
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10
            )
            candidates.append(Path(out.stdout.strip()))
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(debian)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for c in candidates:
        if (c / "initdb").exists() and (c / "pg_ctl").exists():
            return c
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """``start()`` makes and starts the cluster and returns its DSN; ``stop()`` ends it and
    removes every file it made."""

    def __init__(self) -> None:
        self.dsn = ""
        self._dir: Path | None = None
        self._bin: Path | None = None
        self._user: str | None = None
        self._options = ""  # the server's options (its port), for resume()

    def _command(self, *args: str) -> list[str]:
        command = list(args)
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        return command

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._command(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def start(self) -> str:
        self._bin = _bindir()
        if self._bin is None:
            raise PostgresUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl): `make test` installs the "
                "Debian package postgresql; elsewhere install PostgreSQL's server"
            )
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    pwd.getpwnam(name)
                    self._user = name
                    break
            if shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root needs runuser (util-linux)")
        self._dir = Path(tempfile.mkdtemp(prefix="codemode-pg-"))
        data = self._dir / "data"
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self._dir, entry.pw_uid, entry.pw_gid)
        init = self._run(
            str(self._bin / "initdb"),
            "-D",
            str(data),
            "-U",
            "codemode",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        if init.returncode != 0:
            self.stop()
            raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-2000:]}")
        last = ""
        for _ in range(3):  # another process may take the free port first
            port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -k {self._dir} -c fsync=off "
                "-c full_page_writes=off -c max_connections=200"
            )
            started = self._run(
                str(self._bin / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(self._dir / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
                timeout=90,
            )
            if started.returncode == 0:
                self._options = options
                self.dsn = f"host=127.0.0.1 port={port} dbname=postgres user=codemode"
                return self.dsn
            last = started.stderr.strip() + self._log_tail()
        self.stop()
        raise PostgresUnavailable(f"the throwaway PostgreSQL server did not start: {last}")

    def restart(self, mode: str = "fast") -> None:
        """Restart the server (``pg_ctl restart -m fast|immediate``, same port), returning
        once it takes connections again: every connection open to it is cut."""
        self._pg_ctl("-m", mode, "restart")

    def halt(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl stop``), keeping its cluster for :meth:`resume`."""
        self._pg_ctl("-m", mode, "stop")

    def resume(self) -> None:
        """Start a server :meth:`halt` stopped, on its port; returns once it takes
        connections."""
        self._pg_ctl("-o", self._options, "start")

    def standby(self, hot: bool) -> None:
        """Stop the server and start it again as a standby of no primary (it waits for WAL
        for ever): ``hot``, it takes connections but no writes; not, it refuses them ('not
        accepting connections') until :meth:`promote`, as a failover's target does."""
        assert self._dir is not None, "start() it first"
        self.halt()
        (self._dir / "data" / "standby.signal").touch()
        self._pg_ctl("-o", f"{self._options} -c hot_standby={'on' if hot else 'off'}", "start")

    def promote(self) -> None:
        """Make a :meth:`standby` the primary; returns once it takes writes."""
        self._pg_ctl("promote")

    def pid(self) -> int:
        """The process id of the server's postmaster (the first line of postmaster.pid)."""
        assert self._dir is not None, "start() it first"
        return int((self._dir / "data" / "postmaster.pid").read_text().split()[0])

    def halt_command(self, mode: str = "fast") -> list[str]:
        """The command line that does :meth:`halt`, for another process to run."""
        return self._command(*self._pg_ctl_args("-m", mode, "stop"))

    def _pg_ctl_args(self, *args: str) -> list[str]:
        assert self._bin is not None and self._dir is not None, "start() it first"
        return [
            str(self._bin / "pg_ctl"),
            "-D",
            str(self._dir / "data"),
            "-l",  # not pg_ctl's own output, a pipe the new server would hold open
            str(self._dir / "server.log"),
            "-w",
            "-t",
            "60",
            *args,
        ]

    def _pg_ctl(self, *args: str) -> None:
        done = self._run(*self._pg_ctl_args(*args), timeout=90)
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl {' '.join(args)} failed: {done.stderr.strip()}")

    def _log_tail(self) -> str:
        if self._dir is None:
            return ""
        with contextlib.suppress(OSError):
            return "\n" + (self._dir / "server.log").read_text()[-2000:]
        return ""

    def stop(self) -> None:
        if self._dir is None:
            return
        data = self._dir / "data"
        if self._bin is not None and (data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run(
                    str(self._bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"
                )
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None
