"""A stdio MCP server written by hand, for answers the SDK's servers refuse to send.

    python raw_server.py TOOLS.json

It answers ``initialize``, and ``tools/list`` with the text of TOOLS.json as its ``tools``,
sent as it is (an invalid definition, nesting too deep to parse); any other request gets an
error. A server that breaks MCP is what the engine must name and survive.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TOOLS = Path(sys.argv[1]).read_text()


def send(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    head = f'{{"jsonrpc": "2.0", "id": {json.dumps(message["id"])}, '
    if message.get("method") == "initialize":
        version = message["params"]["protocolVersion"]
        answer = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "0"},
        }
        send(head + f'"result": {json.dumps(answer)}}}')
    elif message.get("method") == "tools/list":
        send(head + f'"result": {{"tools": {TOOLS}}}}}')
    else:
        send(head + '"error": {"code": -32601, "message": "not here"}}')
