"""MCP server settings in the ``mcpServers`` format the common MCP clients use.

    {"mcpServers": {
        "files":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
                   "env": {"DEBUG": "0"}, "cwd": "/srv"},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}},
        "memory": {"command": "mcp-server-memory",
                   "unannotated": "run",
                   "tools": {"delete_entities": {"approval": true}}}}}

A server is ``command`` (+ ``args``, ``env``, ``cwd``), run as a child speaking stdio, or
``url`` (+ ``headers``), reached over streamable HTTP. Code mode reads a few keys more, which
other clients ignore:

- ``approval``: ``"annotations"`` (default: a tool marked ``destructiveHint``, or not annotated
  at all when ``unannotated`` is ``"approve"``, waits for a person), ``"always"`` or ``"never"``;
- ``unannotated``: ``"approve"`` (default) or ``"run"``: what ``"annotations"`` does with a
  tool whose server says nothing about its effects;
- ``tools``: per tool, ``{"approval": bool, "readOnly": bool, "idempotent": bool,
  "timeout": seconds, "deferred": bool, "sequential": bool}``, over what the server's
  annotations say;
- ``timeout`` (seconds a call may take; default 300, or the engine's ``call_timeout`` when
  sooner), ``initTimeout`` (seconds the server has to answer ``initialize``, default 30),
  ``deferred`` (declare its tools only through ``tool_search``), ``disabled``.

Each server is checked on its own: a bad entry is one :class:`ServerProblem` naming it, and the
other servers are still usable.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from engine._config import read_config, refuse_unknown
from engine._errors import ConfigError
from engine._schema import a_json_type
from runner import peer_text

Approval = Literal["annotations", "always", "never"]
Unannotated = Literal["approve", "run"]

_SERVER_KEYS = {
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "type",
    "transport",
    "approval",
    "unannotated",
    "tools",
    "timeout",
    "initTimeout",
    "deferred",
    "disabled",
}
_TOOL_KEYS = {"approval", "readOnly", "idempotent", "timeout", "deferred", "sequential"}
DEFAULT_INIT_TIMEOUT = 30.0
# Seconds a call of a server's tool waits for its answer when neither the tool nor the server
# says ("timeout"), nor the engine (call_timeout) bounds it sooner: a server that never
# answers held its script for ever.
DEFAULT_CALL_TIMEOUT = 300.0
MAX_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True)
class ToolSettings:
    """What the config says about one tool of a server, over its annotations."""

    approval: bool | None = None
    read_only: bool | None = None
    idempotent: bool | None = None
    timeout: float | None = None
    deferred: bool | None = None
    sequential: bool | None = None


@dataclass(frozen=True)
class ServerSpec:
    """One upstream MCP server: how to reach it and how its tools are treated."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    approval: Approval = "annotations"
    unannotated: Unannotated = "approve"
    tools: dict[str, ToolSettings] = field(default_factory=dict)
    timeout: float | None = None
    init_timeout: float = DEFAULT_INIT_TIMEOUT
    deferred: bool = False

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def where(self) -> str:
        """How the server is reached, for messages, which a model may read: its command
        without its arguments, or its URL without credentials, query or fragment (a key
        given as ``--api-key sk-...`` or ``?api_key=...`` stays in the config)."""
        if self.command is not None:
            return f"{self.command} ..." if self.args else self.command
        try:
            parts = urllib.parse.urlsplit(str(self.url))
        except ValueError:  # a ServerSpec made in code (a config's URL is checked)
            return "a URL that cannot be read"
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        try:
            port = f":{parts.port}" if parts.port is not None else ""
        except ValueError:
            port = ""
        return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))

    def needs_approval(self, name: str, annotations: Mapping[str, Any]) -> bool:
        """Whether a call of tool ``name`` waits for a person (its annotations, then config)."""
        settings = self.tools.get(name)
        if settings is not None and settings.approval is not None:
            return settings.approval
        if self.approval != "annotations":
            return self.approval == "always"
        if annotations.get("readOnlyHint") is True:
            return False
        destructive = annotations.get("destructiveHint")
        if isinstance(destructive, bool):
            return destructive
        # MCP's default for destructiveHint is true; whether to trust a server that says
        # nothing is the server's setting.
        return self.unannotated == "approve"


@dataclass(frozen=True)
class ServerProblem:
    """A server that cannot serve, or a tool of a serving server that is left out: the
    server's name and one line saying what (naming the tool), why and what to do."""

    server: str
    message: str

    def __str__(self) -> str:
        # What the server said is in it, and it is printed to a terminal and logged: its
        # control characters (escapes that clear the screen, a line end forging a line) show
        # as escapes.
        return f"MCP server {self.server!r}: {peer_text(self.message)}"


# The name code mode gives itself as an MCP server (`codemode mcp serve`) and as a client.
SERVER_NAME = "codemode"


def codemode_version() -> str:
    """This package's version, as it names itself to MCP servers and clients."""
    from importlib import metadata

    try:
        return metadata.version("codemode")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def load_servers_file(path: str | Path) -> tuple[list[ServerSpec], list[ServerProblem]]:
    """The servers of an ``mcpServers`` JSON file. A file that cannot be read or parsed
    raises :class:`ConfigError`; a bad server entry is a problem, and the rest load."""
    path = Path(path)
    raw = read_config(path)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ConfigError(
            f'{path} is not JSON ({e}); an MCP config is {{"mcpServers": {{"name": {{...}}}}}}'
        ) from None
    return parse_servers(data, where=str(path), base=path.absolute().parent)


def parse_servers(
    data: Any, *, where: str = "the MCP config", base: Path | None = None
) -> tuple[list[ServerSpec], list[ServerProblem]]:
    """Servers from ``{"mcpServers": {...}}`` (or the inner mapping itself).

    Raises :class:`ConfigError` when ``data`` is not such a mapping; each bad server is a
    :class:`ServerProblem` and is left out. A relative ``cwd`` is read from ``base``.
    """
    if isinstance(data, Mapping) and "mcpServers" in data:
        data = data["mcpServers"]
    if not isinstance(data, Mapping):
        raise ConfigError(
            f'{where}: MCP servers are an object {{"name": {{"command": ...}}}} under '
            f'"mcpServers", not {a_json_type(data)}'
        )
    specs: list[ServerSpec] = []
    problems: list[ServerProblem] = []
    for name, entry in data.items():
        if not isinstance(name, str) or not name.strip():
            problems.append(ServerProblem(str(name), "a server needs a non-empty name"))
            continue
        try:
            spec = _server(name, entry, base)
        except ConfigError as e:
            problems.append(ServerProblem(name, f"{e} (in {where})"))
            continue
        if spec is not None:
            specs.append(spec)
    return specs, problems


def _server(name: str, entry: Any, base: Path | None) -> ServerSpec | None:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"its entry is {a_json_type(entry)}, not an object")
    refuse_unknown(entry, _SERVER_KEYS, "its entry")
    if entry.get("disabled") is True:
        return None
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise ConfigError('give either "command" (a stdio server) or "url" (streamable HTTP)')
    kwargs: dict[str, Any] = {}
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f'"command" must be a non-empty string, not {command!r}')
        kwargs["command"] = command
        kwargs["args"] = tuple(_strings(entry.get("args", []), '"args"'))
        kwargs["env"] = _environment(entry.get("env", {}))
        cwd = entry.get("cwd")
        if cwd is not None:
            if not isinstance(cwd, str):
                raise ConfigError(f'"cwd" must be a string, not {a_json_type(cwd)}')
            kwargs["cwd"] = str(base / cwd) if base is not None else cwd
        for what, text in (('"command"', command), ('"cwd"', cwd or "")):
            _no_nul(text, what)
    else:
        kwargs["url"] = _url(url)
        kwargs["headers"] = _headers(entry.get("headers", {}))
    approval = entry.get("approval", "annotations")
    if approval not in ("annotations", "always", "never"):
        raise ConfigError(f'"approval" is "annotations", "always" or "never", not {approval!r}')
    unannotated = entry.get("unannotated", "approve")
    if unannotated not in ("approve", "run"):
        raise ConfigError(f'"unannotated" is "approve" or "run", not {unannotated!r}')
    tools = entry.get("tools", {})
    if not isinstance(tools, Mapping):
        raise ConfigError(f'"tools" maps a tool name to its settings, not {a_json_type(tools)}')
    deferred = entry.get("deferred", False)
    if not isinstance(deferred, bool):
        raise ConfigError(f'"deferred" is true or false, not {deferred!r}')
    init_timeout = _seconds(entry.get("initTimeout"), '"initTimeout"')
    return ServerSpec(
        name=name,
        approval=approval,
        unannotated=unannotated,
        tools={str(k): _tool_settings(k, v) for k, v in tools.items()},
        timeout=_seconds(entry.get("timeout"), '"timeout"'),
        init_timeout=init_timeout if init_timeout is not None else DEFAULT_INIT_TIMEOUT,
        deferred=deferred,
        **kwargs,
    )


def _tool_settings(name: Any, entry: Any) -> ToolSettings:
    where = f'"tools" > {name!r}'
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} is {a_json_type(entry)}, not an object")
    refuse_unknown(entry, _TOOL_KEYS, where)
    flags: dict[str, bool | None] = {}
    for key, attr in (
        ("approval", "approval"),
        ("readOnly", "read_only"),
        ("idempotent", "idempotent"),
        ("deferred", "deferred"),
        ("sequential", "sequential"),
    ):
        value = entry.get(key)
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"{where}: {key!r} is true or false, not {value!r}")
        flags[attr] = value
    return ToolSettings(timeout=_seconds(entry.get("timeout"), f"{where}: 'timeout'"), **flags)


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of strings")
    for text in value:
        _no_nul(text, what)
    return list(value)


def _no_nul(text: str, what: str) -> None:
    """A command's text holds no NUL, which no command line or environment can carry (the
    server could not start: 'cannot connect ...: ValueError: embedded null byte')."""
    if "\0" in text:
        raise ConfigError(f"{what} holds a NUL character, which no command line can; remove it")


def _environment(value: Any) -> dict[str, str]:
    env = _string_map(value, '"env"')
    for name, text in env.items():
        if not name or "=" in name:
            raise ConfigError(f'"env" > {name!r} is no environment variable\'s name')
        _no_nul(name + text, f'"env" > {name!r}')
    return env


def _url(url: Any) -> str:
    """``url``, checked as a server's URL can be reached (one that cannot be read failed
    the start as a server 'closed before it connected')."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f'"url" must be an http:// or https:// URL, not {url!r}')
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # a port that is no number raises
    except ValueError as e:
        raise ConfigError(f'"url" {url!r} cannot be read as a URL ({e})') from None
    if not parts.hostname:
        raise ConfigError(f'"url" {url!r} names no host')
    return url


# What HTTP lets a header's name be (RFC 9110's token), and its value hold: visible ASCII,
# and spaces or tabs between them.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"([\x21-\x7e]([\x20\x09]*[\x21-\x7e])*)?")


def _headers(value: Any) -> dict[str, str]:
    """The headers, each one HTTP can carry: the SDK's client refused one at the start in
    an error that showed its value, often a credential (a token read from a file keeps its
    line break), in the server's problem line and the log."""
    headers = _string_map(value, '"headers"')
    for name, text in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigError(f'"headers" > {name!r} is no HTTP header name')
        if not _HEADER_VALUE.fullmatch(text):
            raise ConfigError(
                f'"headers" > {name!r}: its value (not shown) holds what no HTTP header may: a '
                "line break, a character that is not ASCII, or a space at its start or end; "
                "remove it"
            )
    return headers


def _string_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{what} must map strings to strings")
    return dict(value)


def _seconds(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_SECONDS
    ):
        raise ConfigError(f"{what} is a number of seconds above 0, not {value!r}")
    return float(value)
