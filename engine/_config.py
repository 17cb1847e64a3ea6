"""``codemode.toml``: the engine's settings, checked before anything runs.

    [codemode]
    data_dir = ".codemode"          # where the session log lives
    type_check = "on"               # check scripts against the declarations first ("off")
    language = "javascript"         # the language scripts are written in ("python")
    live = true                     # keep a script's process alive while its calls run
    live_wait = 5                   # seconds a live process waits for results, then replay
    live_max = 64                   # live processes at once (default: sized for the machine)
    live_memory = "2gb"             # memory they hold together (default: 1/4 of what's free)

    [codemode.limits]               # the spec's limits table; a limit left out keeps its default
    call_arguments = "4mb"
    memory = "512mb"
    compute_ms = 5000

    [codemode.store]                # the session log (default: SQLite in data_dir, else memory)
    kind = "postgres"               # "sqlite" (needs data_dir), "postgres" or "memory"
    dsn_env = "CODEMODE_DSN"        # postgres: the connection string, from the environment
    answer_timeout = 30             # postgres: seconds to wait for the server's answers
    lease_ms = 30000                # how long a host owns a script without renewing

    [codemode.mcpServers.memory]    # an upstream MCP server (the mcpServers JSON keys)
    command = "mcp-server-memory"

    [codemode.runner]               # what runs script steps
    kind = "local"                  # or "remote"
    mode = "pool"                   # local: "pool", "fork" or "exec"
    slots = 4                       # local: processes at once (default: CPUs, 2 to 8)
    addresses = ["10.0.0.5:7300"]   # remote: runner services
    token_file = "/etc/codemode/runner.token"

Unknown keys and bad values are refused with a :class:`ConfigError` naming them.
"""

from __future__ import annotations

import errno
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from engine._errors import ConfigError, StoreUnavailable
from engine._limits import MAX_SECONDS, Limits, parse_size
from engine._limits import SECONDS as _SECONDS
from engine._limits import is_seconds as _seconds
from engine._live import DEFAULT_LIVE_WAIT
from engine.languages import Language, check_language
from engine.log import DEFAULT_LEASE_MS, LogStore, MemoryStore, PostgresStore, SqliteStore
from engine.log._postgres import DEFAULT_ANSWER_TIMEOUT
from runner import REMOTE_OPTIONS, ScriptRunner, parse_address

# The settings that are tables of their own ([codemode.limits]); the rest take a value.
_TABLE_KEYS = {"limits", "runner", "store", "mcpServers"}
_TOP_KEYS = _TABLE_KEYS | {
    "data_dir",
    "queue_timeout",
    "type_check",
    "language",
    "live",
    "live_wait",
    "live_max",
    "live_memory",
}
_STORE_KEYS = {"kind", "dsn", "dsn_env", "schema", "max_connections", "lease_ms", "answer_timeout"}
# Local runner options, and what a RemoteRunner takes (it owns that list).
_LOCAL_OPTIONS = {"mode", "slots", "script_wait", "data_limit"}
_RUNNER_KEYS = {"kind"} | _LOCAL_OPTIONS | set(REMOTE_OPTIONS)
# Bounds on numbers in the config that no sensible setting comes near: past them a value is a
# typo, and an unbounded one (1e300 seconds) would overflow the timers it sets.
MAX_SLOTS = 4096
MAX_LIVE = 65536
# A codemode.toml is a few hundred bytes; one past this is not a config.
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RunnerConfig:
    kind: str = "local"
    options: dict[str, Any] = field(default_factory=dict)
    base: Path | None = None  # the config file's folder: relative paths are read from it
    # The config file, which the runner's own errors name (a token file it cannot read).
    where: str = field(default="runner options", compare=False, repr=False)


@dataclass(frozen=True)
class StoreConfig:
    """``[codemode.store]``: which log, and how long a host owns a script unrenewed."""

    # "sqlite", "postgres" or "memory"; None (no kind given): SQLite when there is a
    # data_dir, in memory when not.
    kind: str | None = None
    dsn: str | None = None
    # The environment variable that holds the DSN, read when the store is built (a
    # --data-dir that puts the log in SQLite needs it set no more).
    dsn_env: str | None = None
    schema: str = "codemode"
    max_connections: int = 20
    lease_ms: int = DEFAULT_LEASE_MS
    # PostgreSQL: how long a store use waits for the server's answers (see PostgresStore).
    answer_timeout: float = DEFAULT_ANSWER_TIMEOUT
    where: str = field(default="[codemode.store]", compare=False, repr=False)

    def lasting(self, data_dir: Path | str | None) -> bool:
        """Whether :meth:`build`'s log outlives the process (so a script can be resumed)."""
        return self.kind == "postgres" or (self.kind != "memory" and data_dir is not None)

    def resolved_dsn(self) -> str:
        """The PostgreSQL connection string: ``dsn``, or what ``dsn_env`` holds now."""
        if self.dsn is not None:
            return self.dsn
        env = self.dsn_env or ""
        dsn = os.environ.get(env)
        if not dsn:
            raise ConfigError(
                f"{self.where} dsn_env = {env!r}, but ${env} is not set: export the "
                "PostgreSQL connection string in it"
            )
        return dsn

    def build(self, data_dir: Path | None, *, read_only: bool = False) -> LogStore:
        """The store: PostgreSQL, in memory, or SQLite under ``data_dir`` (in memory without
        one when no kind was given). :class:`ConfigError` for ``kind = "sqlite"`` without a
        ``data_dir``: a host that asked for a log on disk is not given one that dies with it.
        ``read_only``: a SQLite log that is there, to be read by a process that may not write
        it (see :class:`SqliteStore`).
        """
        if self.kind == "postgres":
            dsn = self.resolved_dsn()  # whose error names where it was set already
            try:
                return PostgresStore(
                    dsn,
                    schema=self.schema,
                    max_connections=self.max_connections,
                    answer_timeout=self.answer_timeout,
                )
            except ConfigError as e:  # a schema name it refuses, say: where it was set
                raise ConfigError(f"{self.where}: {e}") from None
        if self.kind == "memory":
            return MemoryStore()
        if data_dir is not None and read_only:
            return SqliteStore(data_dir, read_only=True)
        if data_dir is not None:
            return SqliteStore(data_directory(data_dir))
        if self.kind == "sqlite":
            raise ConfigError(
                f'{self.where} kind = "sqlite" needs a data_dir to keep the log in: set '
                'data_dir under [codemode] (or pass --data-dir DIR), or use kind = "memory" '
                "for a log that ends with the process"
            )
        return MemoryStore()


def _outside_codemode(data: Mapping[Any, Any], unknown: list[Any], where: str) -> str:
    """What a config with keys or tables outside [codemode] is told: a setting written
    above any table (``data_dir = ...`` with no ``[codemode]`` line) or a table of ours
    written without its prefix (``[limits]``) is named with where it goes; they were all
    called unknown tables, the keys too. A file that has a [codemode] table already is told
    to move them into it: a second ``[codemode]`` line is not TOML ("Cannot declare
    ('codemode',) twice")."""
    keys = [k for k in unknown if not isinstance(data[k], Mapping)]
    tables = [k for k in unknown if isinstance(data[k], Mapping)]
    has_codemode = isinstance(data.get("codemode"), Mapping)
    if keys:
        shown = ", ".join(_shown(k) for k in keys[:5])
        where_to = (
            f"move {'it' if len(keys) == 1 else 'them'} under the [codemode] table"
            if has_codemode
            else "put a [codemode] line above them"
        )
        return (
            f"{where}: {shown} {'is' if len(keys) == 1 else 'are'} outside any table; the "
            f"settings go under [codemode]: {where_to}"
        )
    settings = [k for k in tables if k in _TOP_KEYS and k not in _TABLE_KEYS]
    if settings:
        return (
            f"{where}: unknown table [{settings[0]}]; {settings[0]} is a setting, not a "
            f"table: write `{settings[0]} = ...` under [codemode]"
        )
    ours = [k for k in tables if k in _TABLE_KEYS]
    if ours:
        where_to = (
            f"move its keys into [codemode.{ours[0]}]"
            if has_codemode
            else f"write [codemode.{ours[0]}]"
        )
        return f"{where}: unknown table [{ours[0]}]; the settings go under [codemode]: {where_to}"
    return (
        f"{where}: unknown table(s) {', '.join(_shown(k) for k in tables[:5])}; the settings "
        "go under [codemode]"
    )


@dataclass(frozen=True)
class Config:
    limits: Limits = field(default_factory=Limits)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    data_dir: Path | None = None
    queue_timeout: float = 300.0
    type_check: Literal["on", "off"] = "on"
    language: Language = "javascript"
    store: StoreConfig = field(default_factory=StoreConfig)
    # [codemode.mcpServers.<name>]: upstream MCP servers, in the mcpServers JSON format's keys,
    # read by engine.mcp (each server is checked there, on its own).
    mcp_servers: dict[str, Any] = field(default_factory=dict)
    live: LiveConfig = field(default_factory=lambda: LiveConfig())

    def with_data_dir(self, data_dir: str | Path | None) -> Config:
        """This config under a ``--data-dir`` given on the command line: the SQLite log in
        that directory, over the file's ``data_dir`` and whatever ``[codemode.store]`` kind it
        names (its lease kept), as a flag beats a config file; unchanged for ``None``."""
        if data_dir is None:
            return self
        if not str(data_dir).strip():  # "$DIR" unset: not the current directory
            raise ConfigError(
                "--data-dir is empty (an unset variable?): give the directory of the log"
            )
        return replace(self, data_dir=Path(data_dir), store=replace(self.store, kind="sqlite"))

    def engine_options(self, *, runner: bool = True) -> dict[str, Any]:
        """``CodeMode``'s keyword arguments for this configuration, as the CLI makes its
        engine: ``CodeMode(tools, **Config.load("codemode.toml").engine_options())``. The
        runner and the session log are made here (``runner=False``: none, for a host that
        gives its own). MCP servers are the host's to start and close:
        ``mcp=await McpServers.start(config.mcp_servers)``."""
        # The runner first: made, it holds nothing yet, while a log holds its file or pool.
        made = {"runner": build_runner(self.runner)} if runner else {}
        options: dict[str, Any] = {
            **made,
            "store": self.store.build(self.data_dir),
            "data_dir": self.data_dir,
            "limits": self.limits,
            "queue_timeout": self.queue_timeout,
            "type_check": self.type_check,
            "language": self.language,
            "lease_ms": self.store.lease_ms,
            **self.live.options(),
        }
        return options

    @classmethod
    def load(cls, path: str | Path) -> Config:
        """Read and check a ``codemode.toml``."""
        path = Path(path)
        raw = read_config(path)
        try:
            text = raw.decode("utf-8-sig")  # an editor's byte-order mark is no TOML
        except UnicodeDecodeError:
            raise ConfigError(f"{path} is not UTF-8 text") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from None
        except RecursionError:  # tomllib recurses once per level of nesting
            raise ConfigError(f"{path} nests arrays or tables too deeply") from None
        # Absolute, so a relative path in the file means the same after a change of directory.
        return cls.from_mapping(data, where=str(path), base=path.absolute().parent)

    @classmethod
    def from_mapping(
        cls, data: dict[str, Any], *, where: str = "config", base: Path | None = None
    ) -> Config:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: a config is a table, not {type(data).__name__}")
        unknown_top = sorted(set(data) - {"codemode"}, key=str)  # of any type: named as they are
        if unknown_top:
            raise ConfigError(_outside_codemode(data, unknown_top, where))
        section = data.get("codemode", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: codemode must be a table")
        refuse_unknown(section, _TOP_KEYS, f"{where}: [codemode]")
        limits_table = section.get("limits", {})
        if not isinstance(limits_table, dict):
            raise ConfigError(f"{where}: [codemode.limits] must be a table")
        limits = Limits.from_mapping(limits_table, where=f"{where}: [codemode.limits]")
        runner = _runner(section.get("runner", {}), where, base)
        data_dir = section.get("data_dir")
        if data_dir is not None and not _a_path(data_dir):
            raise ConfigError(
                f"{where}: [codemode] data_dir = {_in_file(data_dir)} must be the path of a "
                "directory (a non-empty string)"
            )
        queue_timeout = section.get("queue_timeout", 300.0)
        if not _seconds(queue_timeout):
            raise ConfigError(
                f"{where}: [codemode] queue_timeout = {_in_file(queue_timeout)} must be {_SECONDS}"
            )
        type_check = section.get("type_check", "on")
        if type_check not in ("on", "off"):
            raise ConfigError(
                f'{where}: [codemode] type_check = {_in_file(type_check)}; use "on" or "off"'
            )
        language = check_language(
            section.get("language", "javascript"), where=f"{where}: [codemode] language"
        )
        mcp_servers = section.get("mcpServers", {})
        if not isinstance(mcp_servers, dict):
            raise ConfigError(f"{where}: [codemode.mcpServers] must be a table of servers")
        resolved = None
        if data_dir is not None:
            try:
                # "~/..." is the home directory, as in a shell.
                resolved = Path(data_dir).expanduser()
            except RuntimeError as e:  # "~nosuchuser/...": no such home directory
                raise ConfigError(f"{where}: data_dir {data_dir!r}: {e}") from None
            if base is not None and not resolved.is_absolute():
                resolved = base / resolved
        return cls(
            limits=limits,
            runner=runner,
            data_dir=resolved,
            queue_timeout=float(queue_timeout),
            type_check=type_check,
            language=language,
            store=_store(section.get("store", {}), where),
            mcp_servers=mcp_servers,
            live=_live(section, where),
        )


def read_config(path: Path) -> bytes:
    """The bytes of the config file ``path``, read with a bound (a config is small, and a
    path such as /dev/zero must not hang us); raises :class:`ConfigError` naming the file."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path} is too large for a config (over {MAX_CONFIG_BYTES // 1024:,} KiB); "
            "is it the right file?"
        )
    return raw


def refuse_unknown(table: Mapping[str, Any], known: set[str] | frozenset[str], where: str) -> None:
    """Raise :class:`ConfigError` naming the keys of ``table`` that are not ``known``."""
    unknown = sorted(str(key) for key in set(table) - known)
    if unknown:
        listed = ", ".join(_shown(key) for key in unknown[:5])
        more = f" and {len(unknown) - 5:,} more" if len(unknown) > 5 else ""
        raise ConfigError(
            f"{where} has unknown key(s) {listed}{more}; known: {', '.join(sorted(known))}"
        )


@dataclass(frozen=True)
class LiveConfig:
    """The live-step keys of ``[codemode]``, as ``CodeMode`` takes them (``None``: sized for
    the machine)."""

    live: bool = True
    live_wait: float = DEFAULT_LIVE_WAIT
    live_max: int | None = None
    live_memory: int | None = None

    def options(self) -> dict[str, Any]:
        """The ``CodeMode`` keyword arguments."""
        return {
            "live": self.live,
            "live_wait": self.live_wait,
            "live_max": self.live_max,
            "live_memory": self.live_memory,
        }


def _live(section: dict[str, Any], where: str) -> LiveConfig:
    at = f"{where}: [codemode]"
    options = {
        "live": section.get("live", True),
        "live_wait": section.get("live_wait", DEFAULT_LIVE_WAIT),
        "live_max": section.get("live_max"),
        "live_memory": section.get("live_memory"),
    }
    try:
        options["live_memory"] = check_live_options(**options)
    except ConfigError as e:
        raise ConfigError(f"{at} {e}") from None
    options["live_wait"] = float(options["live_wait"])
    return LiveConfig(**options)


def check_live_options(*, live: Any, live_wait: Any, live_max: Any, live_memory: Any) -> int | None:
    """:class:`ConfigError` for a live-step option no host means; else ``live_memory`` in
    bytes (it takes a size word, as codemode.toml does)."""
    if not isinstance(live, bool):
        raise ConfigError(f"live = {_shown(live)} must be true or false")
    if not _seconds(live_wait):
        raise ConfigError(
            f"live_wait = {_shown(live_wait)} must be {_SECONDS} (default "
            f"{DEFAULT_LIVE_WAIT:g}): how long a live process waits for its calls' results"
        )
    if live_max is not None and (
        isinstance(live_max, bool) or not isinstance(live_max, int) or not 0 <= live_max <= MAX_LIVE
    ):
        raise ConfigError(
            f"live_max = {_shown(live_max)} must be a whole number, 0 to {MAX_LIVE:,}: how many "
            "live processes may wait at once (0 keeps none)"
        )
    return None if live_memory is None else parse_size(live_memory, what="live_memory")


def _store(table: Any, where: str) -> StoreConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [codemode.store] must be a table")
    refuse_unknown(table, _STORE_KEYS, f"{where}: [codemode.store]")
    kind = table.get("kind")
    if kind is not None and kind not in ("sqlite", "postgres", "memory"):
        raise ConfigError(
            f"{where}: [codemode.store] kind = {_in_file(kind)}; "
            'use "sqlite", "postgres" or "memory"'
        )
    lease_ms = table.get("lease_ms", DEFAULT_LEASE_MS)
    if not _a_lease(lease_ms):
        raise ConfigError(f"{where}: [codemode.store] lease_ms must be {_LEASE_RANGE}")
    max_connections = table.get("max_connections", 20)
    if (
        isinstance(max_connections, bool)
        or not isinstance(max_connections, int)
        or max_connections < 1
    ):
        raise ConfigError(
            f"{where}: [codemode.store] max_connections must be a whole number, 1 or more"
        )
    schema = table.get("schema", "codemode")
    if not isinstance(schema, str):
        raise ConfigError(f"{where}: [codemode.store] schema must be a string")
    answer_timeout = table.get("answer_timeout", DEFAULT_ANSWER_TIMEOUT)
    if not _seconds(answer_timeout):
        raise ConfigError(
            f"{where}: [codemode.store] answer_timeout must be {_SECONDS}: how long a host "
            "waits for the PostgreSQL server to answer before it gives up on it"
        )
    dsn = table.get("dsn")
    env = table.get("dsn_env")
    if kind == "postgres":
        if dsn is not None and env is not None:
            raise ConfigError(f"{where}: [codemode.store] takes dsn or dsn_env, not both")
        if env is not None:
            if not isinstance(env, str) or not env:
                raise ConfigError(
                    f"{where}: [codemode.store] dsn_env names an environment variable"
                )
        elif not isinstance(dsn, str) or not dsn:
            raise ConfigError(
                f'{where}: [codemode.store] kind = "postgres" needs dsn (a connection string '
                'such as "postgresql://user@host/db") or dsn_env naming a variable that holds one'
            )
    elif dsn is not None or env is not None:
        raise ConfigError(f'{where}: [codemode.store] dsn is for kind = "postgres" only')
    return StoreConfig(
        kind,
        dsn,
        env,
        schema,
        max_connections,
        lease_ms,
        answer_timeout,
        f"{where}: [codemode.store]",
    )


def _runner(table: Any, where: str, base: Path | None) -> RunnerConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [codemode.runner] must be a table")
    refuse_unknown(table, _RUNNER_KEYS, f"{where}: [codemode.runner]")
    at = f"{where}: [codemode.runner]"
    kind = table.get("kind", "local")
    if kind not in ("local", "remote"):
        raise ConfigError(f'{at} kind = {_in_file(kind)}; use "local" or "remote"')
    options = {k: v for k, v in table.items() if k != "kind"}
    if kind == "remote":
        refuse_unknown(options, set(REMOTE_OPTIONS), f'{at} kind = "remote"')
        addresses = options.get("addresses")
        if (
            not isinstance(addresses, list)
            or not addresses
            or not all(isinstance(a, str) for a in addresses)
        ):
            raise ConfigError(f'{at} kind = "remote" needs addresses = ["host:port", ...]')
        for address in addresses:
            try:
                parse_address(address)
            except ValueError as e:  # ["nohost"] was told it had no addresses
                raise ConfigError(f"{at} {e}") from None
        if not any(k in options for k in ("token", "token_file", "token_env")):
            raise ConfigError(
                f'{at} kind = "remote" needs token_file (or token_env) naming the shared token'
            )
        # Relative paths (token_file, ca_file) stay as written: the remote runner reads them
        # from the config's folder, ``base``.
        for key in ("token", "token_file", "token_env", "ca_file", "server_name"):
            if key in options and not _a_path(options[key]):
                raise ConfigError(f"{at} {key} must be a non-empty string")
        if "tls" in options and not isinstance(options["tls"], bool):
            raise ConfigError(f"{at} tls must be true or false")
        for key in ("connect_timeout", "cooldown", "silence"):
            if key in options and not _seconds(options[key]):
                raise ConfigError(f"{at} {key} must be {_SECONDS}")
    else:
        refuse_unknown(options, _LOCAL_OPTIONS, f'{at} kind = "local"')
        mode = options.get("mode", "pool")
        if mode not in ("pool", "fork", "exec"):
            raise ConfigError(f'{at} mode = {_in_file(mode)}; use "pool", "fork" or "exec"')
        slots = options.get("slots")
        if slots is not None and (
            isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS
        ):
            raise ConfigError(f"{at} slots must be a whole number, 1 to {MAX_SLOTS}")
        if "script_wait" in options and not _seconds(options["script_wait"]):
            raise ConfigError(f"{at} script_wait must be {_SECONDS}")
        if "data_limit" in options:
            options["data_limit"] = parse_size(options["data_limit"], what=f"{at} data_limit")
    return RunnerConfig(kind=kind, options=options, base=base, where=where)


def _a_path(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and "\0" not in value


# A lease shorter than this could not be renewed in time; one longer than the other times'
# bound is a typo (and a huge one overflows the stores' time columns).
_LEASE_RANGE = f"whole milliseconds, 100 to {int(MAX_SECONDS * 1000):,}"


def _a_lease(value: Any) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and 100 <= value <= int(MAX_SECONDS * 1000)
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _in_file(value: Any) -> str:
    """A value of codemode.toml's as the file spells it (``false``, not Python's ``False``);
    a keyword's of ``CodeMode(...)`` is :func:`_shown` as Python spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return _shown(value)


def build_runner(config: RunnerConfig) -> ScriptRunner:
    """The runner a ``[codemode.runner]`` table names.

    The options are checked as :meth:`Config.load` checks them, and what the runner itself
    refuses (a token file it cannot read, a CA that does not load, a bad
    ``CODEMODE_SANDBOX_SLOTS``) comes back as a :class:`ConfigError`, so a host catches one
    error family.
    """
    checked = _runner({"kind": config.kind, **config.options}, config.where, config.base)
    options = dict(checked.options)
    at = f"{config.where}: [codemode.runner]"
    try:
        if config.kind == "remote":
            from runner import RemoteRunner

            return RemoteRunner.from_options(options, base=config.base, where=at)
        from runner import ProcessRunner

        return ProcessRunner(**options)
    except ValueError as e:
        said = str(e)
        if said.startswith(at):
            raise ConfigError(said) from None
        # One that starts with a key of the table is about the file ("data_limit is 1,024
        # bytes"); any other, about the process (CODEMODE_SANDBOX_SLOTS), is not the file's.
        named = at if said.split(" ", 1)[0] in options else "[codemode.runner]"
        raise ConfigError(f"{named} {said}") from None


def check_engine_options(
    *,
    worker: Any,
    queue_timeout: Any,
    retry_delay: Any,
    call_timeout: Any,
    lease_ms: Any = DEFAULT_LEASE_MS,
    poll_interval: Any = 1.0,
) -> None:
    """:class:`ConfigError` for a ``CodeMode`` option no host means: a worker that cannot be
    called, times that are not positive finite seconds (``call_timeout`` may be None), or a
    lease shorter than 100 ms (a host could not renew it in time) or longer than a week."""
    if not _a_lease(lease_ms):
        raise ConfigError(
            f"lease_ms = {_shown(lease_ms)} must be {_LEASE_RANGE} (default {DEFAULT_LEASE_MS:,})"
        )
    if not _seconds(poll_interval):
        raise ConfigError(f"poll_interval = {_shown(poll_interval)} must be {_SECONDS}")
    if worker is not None and not callable(worker):
        raise ConfigError(
            f"worker is {type(worker).__name__}; give a function that takes the calls trigger "
            "and answers 'proposed' or a decision per call id"
        )
    for name, value in (("queue_timeout", queue_timeout), ("retry_delay", retry_delay)):
        if not _seconds(value):
            raise ConfigError(f"{name} = {_shown(value)} must be {_SECONDS}")
    if call_timeout is not None and not _seconds(call_timeout):
        raise ConfigError(f"call_timeout = {_shown(call_timeout)} must be {_SECONDS}, or None")


def check_parts(
    *,
    tools: Any,
    skills: Any,
    runner: Any,
    store: Any,
    blobs: Any,
    clock: Any,
    tool_threads: Any,
    mcp: Any,
) -> None:
    """:class:`ConfigError` for a ``CodeMode`` part of the wrong kind, naming it, before
    anything is made: each was a TypeError or AttributeError from deep inside, some only
    at the first ``run_code`` or at ``aclose``."""
    from engine._files import BlobStore
    from engine._tools import Tool
    from engine.log import LogStore

    for name, value in (("tools", tools), ("skills", skills)):
        # One tool, or a name, where the list belongs: as_tools says what to pass.
        one_tool = name == "tools" and (callable(value) or isinstance(value, Tool | str | bytes))
        if not isinstance(value, Iterable) and not one_tool:
            raise ConfigError(f"{name} is a list, not {_shown(value)}")
    if runner is not None and not (
        callable(getattr(runner, "run", None)) and callable(getattr(runner, "aclose", None))
    ):
        raise ConfigError(
            f"runner is {_shown(runner)}; give a ScriptRunner (runner.ProcessRunner, "
            "runner.RemoteRunner), or leave it out"
        )
    if store is not None and not isinstance(store, LogStore):
        raise ConfigError(
            f"store is {_shown(store)}; give a LogStore (SqliteStore, PostgresStore, "
            "MemoryStore), or leave it out"
        )
    if blobs is not None and not isinstance(blobs, BlobStore):
        raise ConfigError(f"blobs is {_shown(blobs)}; give a BlobStore, or leave it out")
    if not callable(clock):
        raise ConfigError(f"clock is {_shown(clock)}; give a function answering seconds")
    if mcp is not None and not all(
        callable(getattr(mcp, method, None)) for method in ("subscribe", "aclose")
    ):
        raise ConfigError(
            f"mcp is {_shown(mcp)}; give McpServers (await McpServers.start(...)), or leave it out"
        )
    if isinstance(tool_threads, bool) or not isinstance(tool_threads, int) or tool_threads < 1:
        raise ConfigError(
            f"tool_threads = {_shown(tool_threads)} must be a whole number, 1 or more"
        )


def not_a_directory(path: Path) -> ConfigError:
    """The error for a ``data_dir`` that is a file: the session log itself, given in place of
    its directory, is told to give that directory."""
    hint = ""
    try:
        with path.open("rb") as f:
            if f.read(16) == b"SQLite format 3\0":
                hint = (
                    f"; it is the session log itself: give its directory, {path.parent}"
                    if path.name == SqliteStore.FILE_NAME
                    else f"; if it is a session log, move it into a directory as "
                    f"<dir>/{SqliteStore.FILE_NAME} and give that directory"
                )
    except OSError:
        pass
    return ConfigError(
        f"data_dir {path} is a file, not a directory; give a directory (the session log "
        f"is kept in it as {SqliteStore.FILE_NAME}){hint}"
    )


def data_directory(data_dir: str | Path) -> Path:
    """``data_dir`` made ready to hold the session log and blobs; :class:`ConfigError` naming
    the path and the fix when it is a file, cannot be made, or cannot be written."""
    if not isinstance(data_dir, str | os.PathLike):
        raise ConfigError(
            f"data_dir = {data_dir!r:.80} must be a path (a str or a Path) of a directory"
        )
    if not _a_path(str(data_dir)):
        raise ConfigError(f"data_dir {str(data_dir)!r} is not a usable path; give a directory")
    path = Path(data_dir)
    try:
        exists = path.exists()
    except OSError as e:  # a directory above it that may not be searched, a name too long
        raise ConfigError(
            f"data_dir {path}: cannot be looked at ({e.strerror or e}); give a directory this "
            "process may use"
        ) from None
    if exists and not path.is_dir():
        raise not_a_directory(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # of nothing: a link that leads nowhere, here or above
        for link in (path, *path.parents):
            if link.is_symlink() and not link.exists():
                where = "" if link == path else f": {link}"
                # The end of its chain of links (the first may be one too), or where it loops.
                end = os.path.realpath(link)
                raise ConfigError(
                    f"data_dir {path}{where} is a link that leads to {end}, which is not there "
                    "(or loops); make that directory, or give another data_dir"
                ) from None
        raise not_a_directory(path) from None
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            # As a full disk under an existing log is (exit 75): free space, run again.
            raise StoreUnavailable(
                f"data_dir {path}: cannot make the directory: the disk it is on is full "
                f"({e.strerror}); free space there, then run again"
            ) from None
        raise ConfigError(
            f"data_dir {path}: cannot make the directory ({e.strerror or e}); give a directory "
            "this process can create"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"data_dir {path} is not writable by this process; give one that is")
    return path
