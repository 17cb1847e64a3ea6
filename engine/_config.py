"""``codemode.toml``: the engine's settings, checked before anything runs.

    [codemode]
    data_dir = ".codemode"          # where the session log lives

    [codemode.limits]               # the spec's limits table; a limit left out keeps its default
    call_arguments = "4mb"
    memory = "512mb"
    compute_ms = 5000

    [codemode.store]                # where the session log lives (default: sqlite in data_dir)
    kind = "postgres"               # "sqlite", "postgres" or "memory"
    dsn_env = "CODEMODE_DSN"        # postgres: the connection string, from the environment
    lease_ms = 30000                # how long a host owns a script without renewing

    [codemode.runner]               # what runs script steps
    kind = "local"                  # or "remote"
    mode = "pool"                   # local: "pool", "fork" or "exec"
    slots = 4                       # local: processes at once (default: CPUs, 2 to 8)
    addresses = ["10.0.0.5:7300"]   # remote: runner services
    token_file = "/etc/codemode/runner.token"

Unknown keys and bad values are refused with a :class:`ConfigError` naming them.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine._errors import ConfigError
from engine._limits import Limits
from engine.log import DEFAULT_LEASE_MS, LogStore, MemoryStore, PostgresStore, SqliteStore
from runner import ScriptRunner
from runner._remote import OPTIONS as REMOTE_OPTIONS

_TOP_KEYS = {"data_dir", "limits", "runner", "queue_timeout", "store"}
_STORE_KEYS = {"kind", "dsn", "dsn_env", "schema", "max_connections", "lease_ms"}
# Local runner options, and what a RemoteRunner takes (it owns that list).
_RUNNER_KEYS = {"kind", "mode", "slots", "script_wait", "data_limit"} | set(REMOTE_OPTIONS)


@dataclass(frozen=True)
class RunnerConfig:
    kind: str = "local"
    options: dict[str, Any] = field(default_factory=dict)
    base: Path | None = None  # the config file's folder: relative paths are read from it


@dataclass(frozen=True)
class StoreConfig:
    """``[codemode.store]``: which log, and how long a host owns a script unrenewed."""

    kind: str = "sqlite"
    dsn: str | None = None
    schema: str = "codemode"
    max_connections: int = 20
    lease_ms: int = DEFAULT_LEASE_MS

    def build(self, data_dir: Path | None) -> LogStore:
        """The store: SQLite under ``data_dir`` (in memory without one), or PostgreSQL."""
        if self.kind == "postgres":
            assert self.dsn is not None
            return PostgresStore(self.dsn, schema=self.schema, max_connections=self.max_connections)
        if self.kind == "sqlite" and data_dir is not None:
            return SqliteStore(data_dir)
        return MemoryStore()


@dataclass(frozen=True)
class Config:
    limits: Limits = field(default_factory=Limits)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    data_dir: Path | None = None
    queue_timeout: float = 300.0
    store: StoreConfig = field(default_factory=StoreConfig)

    @classmethod
    def load(cls, path: str | Path) -> Config:
        """Read and check a ``codemode.toml``."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path} is not UTF-8 text") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from None
        return cls.from_mapping(data, where=str(path), base=path.parent)

    @classmethod
    def from_mapping(
        cls, data: dict[str, Any], *, where: str = "config", base: Path | None = None
    ) -> Config:
        unknown_top = set(data) - {"codemode"}
        if unknown_top:
            raise ConfigError(
                f"{where}: unknown table(s) {', '.join(sorted(unknown_top))}; "
                "the settings go under [codemode]"
            )
        section = data.get("codemode", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: codemode must be a table")
        _refuse_unknown(section, _TOP_KEYS, f"{where}: [codemode]")
        limits_table = section.get("limits", {})
        if not isinstance(limits_table, dict):
            raise ConfigError(f"{where}: [codemode.limits] must be a table")
        limits = Limits.from_mapping(limits_table, where=f"{where}: [codemode.limits]")
        runner = _runner(section.get("runner", {}), where, base)
        data_dir = section.get("data_dir")
        if data_dir is not None and not isinstance(data_dir, str):
            raise ConfigError(f"{where}: [codemode] data_dir must be a path string")
        queue_timeout = section.get("queue_timeout", 300.0)
        if (
            isinstance(queue_timeout, bool)
            or not isinstance(queue_timeout, int | float)
            or queue_timeout <= 0
        ):
            raise ConfigError(f"{where}: [codemode] queue_timeout must be seconds, over 0")
        resolved = None
        if data_dir is not None:
            resolved = Path(data_dir)
            if base is not None and not resolved.is_absolute():
                resolved = base / resolved
        return cls(
            limits=limits,
            runner=runner,
            data_dir=resolved,
            queue_timeout=float(queue_timeout),
            store=_store(section.get("store", {}), where),
        )


def _refuse_unknown(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(table) - known
    if unknown:
        raise ConfigError(
            f"{where} has unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(known))}"
        )


def _store(table: Any, where: str) -> StoreConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [codemode.store] must be a table")
    _refuse_unknown(table, _STORE_KEYS, f"{where}: [codemode.store]")
    kind = table.get("kind", "sqlite")
    if kind not in ("sqlite", "postgres", "memory"):
        raise ConfigError(
            f'{where}: [codemode.store] kind = {kind!r}; use "sqlite", "postgres" or "memory"'
        )
    lease_ms = table.get("lease_ms", DEFAULT_LEASE_MS)
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms < 100:
        raise ConfigError(
            f"{where}: [codemode.store] lease_ms must be whole milliseconds, 100 or more"
        )
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
            dsn = os.environ.get(env)
            if not dsn:
                raise ConfigError(
                    f"{where}: [codemode.store] dsn_env = {env!r}, but ${env} is not set: "
                    "export the PostgreSQL connection string in it"
                )
        if not isinstance(dsn, str) or not dsn:
            raise ConfigError(
                f'{where}: [codemode.store] kind = "postgres" needs dsn (a connection string '
                'such as "postgresql://user@host/db") or dsn_env naming a variable that holds one'
            )
    elif dsn is not None or env is not None:
        raise ConfigError(f'{where}: [codemode.store] dsn is for kind = "postgres" only')
    return StoreConfig(kind, dsn, schema, max_connections, lease_ms)


def _runner(table: Any, where: str, base: Path | None) -> RunnerConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [codemode.runner] must be a table")
    _refuse_unknown(table, _RUNNER_KEYS, f"{where}: [codemode.runner]")
    kind = table.get("kind", "local")
    if kind not in ("local", "remote"):
        raise ConfigError(f'{where}: [codemode.runner] kind = {kind!r}; use "local" or "remote"')
    options = {k: v for k, v in table.items() if k != "kind"}
    if kind == "remote":
        addresses = options.get("addresses")
        if (
            not isinstance(addresses, list)
            or not addresses
            or not all(isinstance(a, str) and ":" in a for a in addresses)
        ):
            raise ConfigError(
                f'{where}: [codemode.runner] kind = "remote" needs addresses = ["host:port", ...]'
            )
        if not any(k in options for k in ("token", "token_file", "token_env")):
            raise ConfigError(
                f'{where}: [codemode.runner] kind = "remote" needs token_file (or token_env) '
                "naming the shared token"
            )
        if base is not None and isinstance(options.get("token_file"), str):
            token_file = Path(options["token_file"])
            options["token_file"] = str(
                token_file if token_file.is_absolute() else base / token_file
            )
    else:
        mode = options.get("mode", "pool")
        if mode not in ("pool", "fork", "exec"):
            raise ConfigError(
                f'{where}: [codemode.runner] mode = {mode!r}; use "pool", "fork" or "exec"'
            )
        slots = options.get("slots")
        if slots is not None and (
            isinstance(slots, bool) or not isinstance(slots, int) or slots < 1
        ):
            raise ConfigError(f"{where}: [codemode.runner] slots must be a whole number, 1 or more")
    return RunnerConfig(kind=kind, options=options, base=base)


def build_runner(config: RunnerConfig) -> ScriptRunner:
    """The runner a ``[codemode.runner]`` table names."""
    options = dict(config.options)
    if config.kind == "remote":
        from runner import RemoteRunner

        return RemoteRunner.from_options(options, base=config.base)
    from runner import ProcessRunner

    return ProcessRunner(**_local_options(options))


def _local_options(options: dict[str, Any]) -> dict[str, Any]:
    known = {"mode", "slots", "script_wait", "data_limit"}
    local = {k: v for k, v in options.items() if k in known}
    if "data_limit" in local:
        from engine._limits import parse_size

        local["data_limit"] = parse_size(local["data_limit"], what="[codemode.runner] data_limit")
    return local
