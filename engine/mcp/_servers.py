"""McpServers: the tools of several live upstream MCP servers, kept current.

    servers = await McpServers.start("mcp.json")        # or {"mcpServers": {...}}
    for problem in servers.problems:                      # one line per server that failed
        print(problem)
    engine = CodeMode(my_tools, mcp=servers)              # engine.aclose() closes them

Each server's tools are named ``<server>__<tool>``; a call goes to the server and its
``CallToolResult`` is unwrapped (``engine._mcp``). Approval follows the annotations and the
server's settings (``engine.mcp._config``). When a server says its tools changed, they are
listed again and the engine is told: tools that did not change keep their declaration; a tool
that appears mid-session is deferred (found with ``tools.tool_search``), so the ``run_code``
description stays byte-identical for the tools it already had.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from engine._errors import ConfigError, ToolDefinitionError
from engine._mcp import answering, wrap_handler
from engine._tools import Tool
from engine.mcp import _config
from engine.mcp._config import (
    ServerProblem,
    ServerSpec,
    ToolSettings,
    load_servers_file,
    parse_servers,
)
from engine.mcp._upstream import RECONNECT_WAIT, Upstream

logger = logging.getLogger("codemode.mcp")

Listener = Callable[[list[Tool]], None]


class McpServers:
    """Live sessions with upstream MCP servers and the tools they offer (module docstring).

    Build it with :meth:`start`. ``tools`` is the current list; ``problems`` names each server
    that could not be used (bad entry, missing command, no answer to ``initialize``) while the
    others serve, then each tool a serving server lists that is left out (its definition does
    not follow MCP or cannot be declared, its name is taken) while its other tools serve; the
    latter are those of each server's last listing (one that comes later is also logged as a
    warning). :meth:`aclose` closes every session and ends every child process.
    """

    def __init__(self, specs: Iterable[ServerSpec], *, errlog: TextIO | None = None) -> None:
        self.specs = list(specs)
        self.problems: list[ServerProblem] = []
        self._server_problems: list[ServerProblem] = []
        self._tool_problems: dict[str, list[ServerProblem]] = {}
        self._errlog = errlog
        self._upstreams: dict[str, Upstream] = {}
        self._definitions: dict[str, list[dict[str, Any]]] = {}
        self._built: dict[str, list[Tool]] = {}
        self._declared: set[tuple[str, str]] | None = None
        self._listeners: list[Listener] = []
        self.tools: list[Tool] = []

    @classmethod
    async def start(
        cls,
        config: str | Path | Mapping[str, Any] | Iterable[ServerSpec],
        *,
        only: Iterable[str] | None = None,
        errlog: TextIO | None = None,
        problems: Iterable[ServerProblem] = (),
        log_problems: bool = True,
    ) -> McpServers:
        """Connect to every server of ``config`` at once: an ``mcpServers`` JSON file, a
        mapping in that format, or :class:`ServerSpec` objects. ``only`` picks servers by
        name (an unknown name is a problem naming it). Servers that fail are in ``problems``
        (after the ``problems`` given, found while reading the config elsewhere), each
        also logged as a warning unless ``log_problems`` is false (a caller that shows them
        itself); raises :class:`ConfigError` only when ``config`` itself cannot be read."""
        earlier = list(problems)
        if isinstance(config, str | Path):
            specs, problems = load_servers_file(config)
        elif isinstance(config, Mapping):
            specs, problems = parse_servers(config)
        else:
            specs = list(config)
            if not all(isinstance(s, ServerSpec) for s in specs):
                raise ConfigError("McpServers.start takes a path, a mapping or ServerSpec objects")
            problems = []
        problems = [*earlier, *problems]
        if only is not None:
            wanted = list(dict.fromkeys(only))
            known = {s.name for s in specs} | {p.server for p in problems}
            for name in wanted:
                if name not in known:
                    problems.append(
                        ServerProblem(
                            name,
                            "no server of that name in the config (it has: "
                            f"{', '.join(sorted(known)) or 'none'})",
                        )
                    )
            specs = [s for s in specs if s.name in wanted]
            problems = [p for p in problems if p.server in wanted]
        servers = cls(specs, errlog=errlog)
        servers._server_problems.extend(problems)
        try:
            await servers._connect(log_problems)
        except BaseException:
            await servers.aclose()
            raise
        return servers

    async def _connect(self, log_problems: bool) -> None:
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise ConfigError(f"two MCP servers share a name: {names}")
        for spec in self.specs:
            self._upstreams[spec.name] = Upstream(spec, self._listed, errlog=self._errlog)
        results = await asyncio.gather(*(u.start() for u in self._upstreams.values()))
        for upstream, failed in zip(list(self._upstreams.values()), results, strict=True):
            if failed is not None:
                self._server_problems.append(ServerProblem(upstream.name, failed))
                await upstream.aclose()
                del self._upstreams[upstream.name]
        self._gather_problems()
        for problem in self.problems if log_problems else ():
            logger.warning("%s", problem)
        self._declared = {(t.source or "", t.original_name) for t in self.tools}

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with the new tool list each time a server's tools change."""
        self._listeners.append(listener)

    @property
    def servers(self) -> list[str]:
        """The names of the servers that are serving."""
        return list(self._upstreams)

    async def aclose(self) -> None:
        """Close every session and end every child process."""
        upstreams = list(self._upstreams.values())
        self._upstreams.clear()
        await asyncio.gather(*(u.aclose() for u in upstreams), return_exceptions=True)

    async def __aenter__(self) -> McpServers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- tools ----

    def _gather_problems(self) -> None:
        self.problems = [
            *self._server_problems,
            *(p for spec in self.specs for p in self._tool_problems.get(spec.name, [])),
        ]

    def _listed(
        self, upstream: Upstream, definitions: list[dict[str, Any]], refused: list[str]
    ) -> None:
        """A server listed its tools: rebuild those that changed, note the problems of those
        left out (``refused`` by the listing, or here), tell the listeners."""
        left_out = list(refused)
        if self._definitions.get(upstream.name) == definitions:
            self._note_left_out(upstream, left_out)
            return
        old = {t.original_name: t for t in self._built.get(upstream.name, [])}
        old_definitions = {
            d.get("name"): d
            for d in self._definitions.get(upstream.name, [])
            if isinstance(d, dict)
        }
        # Tools keep the place they had (a server that re-adds a tool lists it last), so the
        # declarations of the tools that did not change stay where they were; new ones follow.
        place = {name: i for i, name in enumerate(old_definitions)}
        definitions = sorted(definitions, key=lambda d: place.get(d.get("name"), len(place)))
        tools: list[Tool] = []
        seen: set[str] = set()
        for definition in definitions:
            name = definition.get("name")
            if name in seen:
                left_out.append(f"it lists two tools named {name!r}; the second is left out")
                continue
            if isinstance(name, str):
                seen.add(name)
            if isinstance(name, str) and old_definitions.get(name) == definition and name in old:
                tools.append(old[name])  # unchanged: the very same declaration
                continue
            try:
                tools.append(self._tool(upstream, definition))
            except ToolDefinitionError as e:
                left_out.append(f"tool {str(name)[:100]!r} is left out: {e}")
        self._definitions[upstream.name] = definitions
        self._built[upstream.name] = tools
        self._note_left_out(upstream, left_out)
        unknown = set(upstream.spec.tools) - {t.original_name for t in tools}
        if unknown:
            logger.warning(
                "MCP server %r: the config sets tools it does not have: %s",
                upstream.name,
                ", ".join(sorted(unknown)),
            )
        self.tools = [t for spec in self.specs for t in self._built.get(spec.name, [])]
        if self._declared is not None:
            for listener in self._listeners:
                listener(self.tools)

    def _note_left_out(self, upstream: Upstream, left_out: list[str]) -> None:
        """The problems of the tools ``upstream``'s last listing left out; those that are
        new after the start are logged (the start's are shown with the others)."""
        before = {p.message for p in self._tool_problems.get(upstream.name, [])}
        problems = [ServerProblem(upstream.name, line) for line in dict.fromkeys(left_out)]
        self._tool_problems[upstream.name] = problems
        self._gather_problems()
        if self._declared is not None:
            for problem in problems:
                if problem.message not in before:
                    logger.warning("%s", problem)

    def _tool(self, upstream: Upstream, definition: dict[str, Any]) -> Tool:
        spec = upstream.spec
        name = definition.get("name")
        hints = definition.get("annotations")
        hints = hints if isinstance(hints, Mapping) else {}
        settings = spec.tools.get(name, ToolSettings()) if isinstance(name, str) else ToolSettings()
        # The config's word over the server's, for what a call does to the world and so for
        # whether it waits for a person: "readOnly": false on a tool hinted read-only is a
        # tool with effects, whose call a crash cut is never run again.
        if settings.read_only is not None:
            hints = {**hints, "readOnlyHint": settings.read_only}
        if settings.idempotent is not None:
            hints = {**hints, "idempotentHint": settings.idempotent}
        if settings.read_only is not None or settings.idempotent is not None:
            definition = {**definition, "annotations": hints}
        deferred = spec.deferred if settings.deferred is None else settings.deferred
        if self._declared is not None and (spec.name, name) not in self._declared:
            deferred = True  # new mid-session: reached through tool_search, the prompt holds
        original = str(name)
        timeout = settings.timeout if settings.timeout is not None else spec.timeout
        # A call waits for a server that is reconnecting at most half its own timeout, so
        # that it fails saying the call was not sent, not "timed out ... may have taken effect".
        wait = RECONNECT_WAIT if timeout is None else min(RECONNECT_WAIT, timeout / 2)

        async def call(**arguments: Any) -> Any:
            within = None if timeout is not None else _config.DEFAULT_CALL_TIMEOUT
            return await upstream.call(original, arguments, wait=wait, within=within)

        call.__name__ = f"{spec.name}__{original}"
        tool = Tool.from_mcp(
            definition,
            call,
            source=spec.name,
            needs_approval=spec.needs_approval(original, hints),
            deferred=deferred,
            timeout=timeout,
            sequential=bool(settings.sequential),
        )
        # The server's results, not the host's: one that breaks its output schema, or is an
        # error with no text, is said to be the server's (a host's from_mcp tool with a
        # source is the host's). The handler first: setting it clears _answering.
        tool.handler = wrap_handler(call, tool=original, server=spec.name)
        tool._answering = answering(call, tool=original, server=spec.name)
        return tool
