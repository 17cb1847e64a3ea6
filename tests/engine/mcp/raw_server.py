"""A stdio MCP server written by hand, for answers the SDK's servers refuse to send.

    python raw_server.py TOOLS.json            # one page: the file's text as "tools"
    python raw_server.py PAGES.json --pages    # a JSON list of tool lists, one page each
    python raw_server.py TOOLS.json --endless  # the file's text, with a nextCursor, forever
    python raw_server.py TOOLS.json --banner   # two lines of text first, as a log to stdout
    python raw_server.py TOOLS.json --stubborn # ignores SIGTERM and outlives its stdin
    python raw_server.py TOOLS.json --refuse-list  # tools/list answered with an error
    python raw_server.py TOOLS.json --no-tools     # tools/list answered as a method it has not
    python raw_server.py TOOLS.json --old-protocol # initialize answered with version 1999-01-01
    python raw_server.py TOOLS.json --flood        # says its tools changed, 100 times, 20 ms apart
    python raw_server.py TOOLS.json --changed-first  # says its tools changed as it lists them first
    python raw_server.py TOOLS.json --grow     # its tools change as it is called (add, later)

It answers ``initialize``; ``tools/list`` with the text of TOOLS.json as its ``tools``, sent
as it is (an invalid definition, nesting too deep to parse), or a page of PAGES.json (the
next page's cursor is its index); ``tools/call`` with the name and arguments it got, as JSON
text, but for these tools: ``badresult`` is answered with ``content`` that is not a list,
``refuse`` with an error whose message has three lines, ``surrogate`` with a text holding a lone surrogate, ``deep`` with structured content nested 300 deep (``deeper``: 5,000), ``structured`` with its argument ``value`` as structured content, ``scalar`` with a result of 5, ``noisy`` after a log notification that breaks MCP, ``latin`` with a text's byte that is no UTF-8, ``spam`` is answered and from then
on every listing is slow and says first that the tools changed again,
``change`` is answered, then announced as changed (``list_changed``), and no ``tools/list``
after that is answered, and ``crash`` starts a process that holds the server's stdout
(``sleep``), then exits without an answer; ``sleep`` is answered after its argument
``seconds``. With ``--flood``, from its first listing on it says its tools changed every
20 ms, 100 times over, each listing taking 0.1 s and holding a tool ``v<N>`` (N: the
changes said so far), and ``flood`` answers how many listings it made during the flood
(``during``) and whether it is over (``over``). With ``--changed-first``, it says its tools
changed before it answers its first listing, which holds a tool ``first``; those after hold
``later`` instead. With ``--grow``, each listing takes 0.3 s and holds the tools added so
far: ``add`` adds a tool named its argument ``name``, says the tools changed, then answers (as
MCP allows), and its argument ``list_seconds`` is how long the next listing takes; ``later``
adds one as ``add`` does, but answers first and says the tools changed 0.2 s after; ``exit``
ends the server, unanswered. Any other request gets an error. A server that breaks MCP is what
the engine must name and survive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

TEXT = Path(sys.argv[1]).read_text()
MODE = sys.argv[2] if len(sys.argv) > 2 else ""
PAGES = [json.dumps(page) for page in json.loads(TEXT)] if MODE == "--pages" else [TEXT]


WRITING = threading.Lock()  # the flood's thread writes too


def send(text: str) -> None:
    with WRITING:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


FLOOD = {"sent": 0, "during": 0, "on": False, "over": False}


def flood() -> None:
    for _ in range(100):
        time.sleep(0.02)
        FLOOD["sent"] += 1
        send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}')
    FLOOD["on"], FLOOD["over"] = False, True


if MODE == "--stubborn":  # ignores SIGTERM, and outlives the end of its stdin
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if MODE == "--banner":  # as a server that logs to stdout: text that is no message
    send("Starting server v1.0 ...")
    send("listening on stdio")
hang_listings = False
listings = 0
grown: list[dict[str, object]] = []  # --grow: the tools added, and the next listing's time
next_listing = 0.3


def announce_later() -> None:
    time.sleep(0.2)
    send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}')


spamming = False  # after a call of `spam`: each listing is slow, and says the tools changed
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    head = f'{{"jsonrpc": "2.0", "id": {json.dumps(message["id"])}, '
    params = message.get("params") or {}
    if message.get("method") == "initialize":
        answer = {
            "protocolVersion": "1999-01-01"
            if MODE == "--old-protocol"
            else params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "0"},
        }
        send(head + f'"result": {json.dumps(answer)}}}')
    elif message.get("method") == "tools/list":
        if hang_listings:
            continue
        if MODE == "--no-tools":  # a server of resources or prompts alone
            send(head + '"error": {"code": -32601, "message": "Method not found"}}')
            continue
        if MODE == "--refuse-list":
            send(head + '"error": {"code": -32000, "message": "license expired, run foo login"}}')
            continue
        if spamming:
            send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}')
            time.sleep(0.05)
        listings += 1
        if MODE == "--changed-first":  # changed as it is listed on connecting
            if listings == 1:
                send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}')
            name = "first" if listings == 1 else "later"
            tools = [*json.loads(TEXT), {"name": name, "inputSchema": {"type": "object"}}]
            send(head + f'"result": {json.dumps({"tools": tools})}}}')
            continue
        if MODE == "--flood":
            time.sleep(0.1)
            FLOOD["during"] += FLOOD["on"]
            tools = [*json.loads(TEXT), {"name": f"v{FLOOD['sent']}", "inputSchema": {}}]
            send(head + f'"result": {json.dumps({"tools": tools})}}}')
            if not FLOOD["on"] and not FLOOD["over"]:
                FLOOD["on"] = True
                threading.Thread(target=flood, daemon=True).start()
            continue
        if MODE == "--grow":
            time.sleep(next_listing)
            next_listing = 0.3
            tools = [*json.loads(TEXT), *grown]
            send(head + f'"result": {json.dumps({"tools": tools})}}}')
            continue
        page = int(params.get("cursor") or 0) if MODE == "--pages" else 0
        more = page + 1 < len(PAGES) or MODE == "--endless"
        cursor = f', "nextCursor": "{page + 1}"' if more else ""
        send(head + f'"result": {{"tools": {PAGES[page]}{cursor}}}}}')
    elif message.get("method") == "tools/call":
        text = json.dumps({"called": params.get("name"), "arguments": params.get("arguments")})
        answer: dict[str, object] = {"content": [{"type": "text", "text": text}]}
        if params.get("name") == "badresult":
            answer = {"content": "not a list"}
        if params.get("name") == "blocks":
            count = (params.get("arguments") or {}).get("n", 1)
            answer = {"content": [{"type": "text", "text": "x"}] * count}
        if params.get("name") == "structured":  # its argument "value" as structured content
            value = (params.get("arguments") or {}).get("value")
            answer = {"content": [{"type": "text", "text": json.dumps(value)}]}
            answer["structuredContent"] = value
        if params.get("name") == "sleep":
            time.sleep((params.get("arguments") or {}).get("seconds", 0))
        if params.get("name") == "flood":
            answer = {"content": [{"type": "text", "text": json.dumps(FLOOD)}]}
        if MODE == "--grow" and params.get("name") in ("add", "later"):
            arguments = params.get("arguments") or {}
            tool = {"name": arguments["name"], "inputSchema": {"type": "object"}}
            grown.append({**tool, "annotations": {"readOnlyHint": True}})
            next_listing = arguments.get("list_seconds", next_listing)
            if params.get("name") == "add":
                send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}')
            else:
                threading.Thread(target=announce_later, daemon=True).start()
        if MODE == "--grow" and params.get("name") == "exit":
            os._exit(0)
        if params.get("name") == "mute":  # an error that says nothing
            answer = {"content": [], "isError": True}
        if params.get("name") == "noisy":  # a log notification that breaks MCP, first
            note = {"level": "loud", "data": "hello"}
            send(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": note}))
        if params.get("name") == "scalar":  # a result that is no object
            answer = 5  # type: ignore[assignment]
        if params.get("name") == "deep":  # structured content nested past the SDK's parser
            nested: dict[str, object] = {}
            for _ in range(300):
                nested = {"a": nested}
            answer = {"content": [{"type": "text", "text": "deep"}], "structuredContent": nested}
        if params.get("name") == "deeper":  # nested past Python's own parser too
            nested_text = '{"a": ' * 5000 + "{}" + "}" * 5000
            send(head + f'"result": {{"content": [], "structuredContent": {nested_text}}}}}')
            continue
        if params.get("name") == "surrogate":  # a lone surrogate, escaped as json.dumps does
            answer = {"content": [{"type": "text", "text": "caf\udce9"}]}
        if params.get("name") == "refuse":  # an error whose message is a whole report
            report = "cannot do it:\n  1 validation error\n  see https://errors.example/v2"
            send(head + f'"error": {{"code": -32000, "message": {json.dumps(report)}}}}}')
            continue
        if params.get("name") == "latin":  # text in Latin-1, its bytes sent as they are
            sys.stdout.flush()
            body = b'"result": {"content": [{"type": "text", "text": "caf\xe9"}]}}\n'
            sys.stdout.buffer.write(head.encode() + body)
            sys.stdout.buffer.flush()
            continue
        if params.get("name") == "crash":
            subprocess.Popen(["sleep", "3600"])  # inherits stdout, and holds it open
            os._exit(1)
        send(head + f'"result": {json.dumps(answer)}}}')
        if params.get("name") == "change":
            send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}')
            hang_listings = True
        if params.get("name") == "spam":
            send('{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}')
            spamming = True
    else:
        send(head + '"error": {"code": -32601, "message": "not here"}}')
if MODE == "--stubborn":
    while True:
        time.sleep(3600)
