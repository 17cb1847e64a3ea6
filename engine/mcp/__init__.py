"""MCP both ways: upstream MCP servers as tool sources, and ``codemode mcp serve``.

- :class:`McpServers` holds live sessions with upstream servers (stdio or streamable HTTP,
  configured in the ``mcpServers`` format) and turns their tools into :class:`engine.Tool`
  objects named ``<server>__<tool>``; ``CodeMode(..., mcp=servers)`` uses them.
- :mod:`engine.mcp._serve` is an MCP server whose tool is ``run_code``, for any MCP client.

The official ``mcp`` SDK is imported only when a session opens or a server starts, so this
package imports without it (``pip install 'codemode[mcp]'`` brings it).
"""

from engine.mcp._config import (
    ServerProblem,
    ServerSpec,
    ToolSettings,
    load_servers_file,
    parse_servers,
)
from engine.mcp._servers import McpServers

__all__ = [
    "McpServers",
    "ServerProblem",
    "ServerSpec",
    "ToolSettings",
    "load_servers_file",
    "parse_servers",
]
