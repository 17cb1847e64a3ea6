"""The runner service's line budget: the script and results lines its connections are
reading share one bound of bytes, so a few peers cannot make it hold a line of
``max_script_line`` on every connection. A line past it is read to its end and thrown away, the
client is told the service is busy (and why), and every line's share comes back however the
line ends. Real connections to a real service; its local runner needs no process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from engine import CodeMode, StepUnavailable
from runner import FileReader, LiveRun, RemoteRunner, RunError, ScriptRunner, Step
from runner import _wire as wire
from runner._remote import RemoteLive
from runner._service import RunnerService, default_line_memory
from sandbox.protocol import Call, Record, Script

from .remote_support import (
    TOKEN,
    FakeRunner,
    RawClient,
    blocked,
    script,
    service_process,
    services,
)

KiB = 1024
MiB = 1024 * KiB
BUDGET = 1 * MiB


async def until(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Poll ``condition`` until it holds (bounded, so a bug fails instead of hanging)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.01)


def script_line(code: str, id: str = "s") -> bytes:
    body = {**script(code, id=id).model_dump(exclude_unset=True), "tenant": "t"}
    return orjson.dumps({"script": body}) + b"\n"


async def welcomed(address: str) -> RawClient:
    client = await RawClient.connect(address)
    assert "welcome" in await client.hello()
    return client


async def holding(service: RunnerService, line: bytes, at_least: int) -> RawClient:
    """A client that has sent the first part of ``line`` (no newline), once the service holds
    at least ``at_least`` bytes of the budget for it."""
    client = await welcomed(service.address)
    await client.send(line)
    await until(lambda: service.line_bytes >= at_least, "the service to read the part line")
    return client


async def test_a_line_past_the_budget_is_refused_busy_and_the_connection_goes_on() -> None:
    """While one connection holds most of the budget with a line it is still sending, another
    connection's big line is read to its end and answered busy, naming the budget and what to
    do; its connection takes the next request, and once the first line is done a line of the
    same size is taken. Without the budget, both are held at once."""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        first = script_line("// " + "a" * (800 * KiB), id="first")
        cut = len(first) - 100
        a = await holding(service, first[:cut], 700 * KiB)

        b = await welcomed(service.address)
        await b.send(script_line("// " + "b" * (600 * KiB), id="second"))
        answer = await b.receive()
        assert "busy" in answer, answer
        why = answer["busy"]["error"]
        assert "line budget of 1,048,576 bytes" in why
        assert "--line-memory" in why and "again" in why
        assert service.lines_refused == 1
        # B's share is back: only A's line is held.
        assert 0 < service.line_bytes <= len(first)

        # The refused connection is in step: its next request is served.
        await b.send(script_line("return 1", id="small"))
        assert (await b.receive())["step"]["value"] == {"runner": "fake", "id": "small"}

        # A's line was never disturbed: it ends, is run, and gives its share back.
        await a.send(first[cut:])
        assert (await a.receive())["step"]["value"] == {"runner": "fake", "id": "first"}
        assert service.line_bytes == 0

        # Now the budget has room for B's line.
        await b.send(script_line("// " + "b" * (600 * KiB), id="again"))
        assert (await b.receive())["step"]["value"] == {"runner": "fake", "id": "again"}
        assert service.line_bytes == 0
        a.close()
        b.close()


async def test_the_engine_side_gets_a_retryable_error_naming_the_budget() -> None:
    """A RemoteRunner whose only service has no room for its line raises a RunError that is
    not permanent (the engine puts the step back on its queue), naming the budget; with room
    again, the same step runs."""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        first = script_line("// " + "a" * (800 * KiB), id="first")
        a = await holding(service, first[:-100], 700 * KiB)
        remote = RemoteRunner([service.address], TOKEN)
        big = script("// " + "b" * (600 * KiB), id="big")
        with pytest.raises(RunError, match="line budget of 1,048,576 bytes") as caught:
            await remote.run(big)
        assert not caught.value.permanent
        assert not remote.out_of_rotation()  # busy, not broken
        a.close()
        await until(lambda: service.line_bytes == 0, "the dropped line's share to come back")
        step = await remote.run(big)
        assert step.value == {"runner": "fake", "id": "big"}
        await remote.aclose()


async def test_the_budget_comes_back_however_a_line_ends() -> None:
    """A line's share is given back when it is done, when its client drops the connection
    mid-line, when it breaks the protocol (too long, not JSON) and when it stalls."""
    async with services(
        FakeRunner(), line_memory=BUDGET, max_script_line=900 * KiB, line_timeout=1.0
    ) as [service]:
        line = script_line("// " + "x" * (500 * KiB))

        # Dropped mid-line.
        client = await holding(service, line[:-10], 400 * KiB)
        client.close()
        await until(lambda: service.line_bytes == 0, "a dropped line's share")

        # Over the line bound: a protocol error, the connection dropped.
        client = await welcomed(service.address)
        await client.send(b'{"script": "' + b"x" * (950 * KiB))
        assert (await client.receive())["error"]["cause"] == "protocol"
        await until(lambda: service.line_bytes == 0, "an over-long line's share")
        client.close()

        # Not JSON.
        client = await welcomed(service.address)
        await client.send(b"{" + b"x" * (300 * KiB) + b"\n")
        assert (await client.receive())["error"]["cause"] == "protocol"
        await until(lambda: service.line_bytes == 0, "a malformed line's share")
        client.close()

        # Stalled mid-line past line_timeout.
        client = await holding(service, line[:-10], 400 * KiB)
        assert await client.closed()
        await until(lambda: service.line_bytes == 0, "a stalled line's share")

        # Done and run.
        client = await welcomed(service.address)
        await client.send(line)
        assert (await client.receive())["step"]["value"]["id"] == "s"
        assert service.line_bytes == 0
        client.close()

        # A line refused for room that is then dropped mid-skip holds nothing either.
        big = script_line("// " + "a" * (800 * KiB))
        a = await holding(service, big[:-10], 700 * KiB)
        b = await welcomed(service.address)
        await b.send(line[:-10])
        await until(lambda: service.lines_refused == 1, "the second line to be refused")
        b.close()
        a.close()
        await until(lambda: service.line_bytes == 0, "every share to come back")


async def test_small_requests_pass_when_the_budget_is_full() -> None:
    """The first 64 KiB of each line are not counted: a health check and a small step pass
    while big lines hold the whole budget."""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        first = script_line("// " + "a" * (1000 * KiB))
        a = await holding(service, first[:-100], 900 * KiB)
        remote = RemoteRunner([service.address], TOKEN)
        loads = await remote.loads()
        assert isinstance(loads[service.address], wire.Load)
        step = await remote.run(script("// " + "s" * (40 * KiB), id="small"))
        assert step.value == {"runner": "fake", "id": "small"}
        a.close()
        await remote.aclose()


async def test_no_line_longer_than_the_budget_is_taken() -> None:
    """The welcome's max_line is within the budget and the 64 KiB each line holds without it
    (a longer line could never be read whole), so a client does not send it; the default
    budget is sized from the machine. A budget of 0 still takes health checks and small steps
    (it took nothing: a line over the bound of 0 bytes)."""
    async with services(FakeRunner(), line_memory=BUDGET, max_script_line=4 * MiB) as [service]:
        assert service.max_line == BUDGET + 64 * KiB
        client = await RawClient.connect(service.address)
        assert (await client.hello())["welcome"]["max_line"] == BUDGET + 64 * KiB
        client.close()
    async with services(FakeRunner(), line_memory=0) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        assert isinstance((await remote.loads())[service.address], wire.Load)
        step = await remote.run(script("// " + "s" * (40 * KiB), id="small"))
        assert step.value == {"runner": "fake", "id": "small"}
        await remote.aclose()
    async with services(FakeRunner()) as [service]:
        assert service.lines.total == default_line_memory() >= 64 * MiB
    with pytest.raises(ValueError, match="line_memory = -1 is negative"):
        RunnerService(TOKEN, runner=FakeRunner(), line_memory=-1)


class _Live(LiveRun):
    """A live run that needs no process: resumed, it finishes; closing it is counted."""

    known = 0
    waiting = 1

    def __init__(self) -> None:
        self.closed = False

    @property
    def memory_bytes(self) -> int:
        return 0

    async def resume(self, records: list[Record]) -> Step:
        return Step(outcome="finished", value=len(str(records[0].result)))

    async def close(self) -> None:
        self.closed = True


class _LiveRunner(ScriptRunner):
    def __init__(self) -> None:
        self.made: list[_Live] = []

    async def run(
        self,
        script: Script,
        files: FileReader | None = None,
        *,
        tenant: str = "default",
        live: bool = False,
    ) -> Step:
        self.made.append(_Live())
        return Step(outcome="calls", calls=[Call(name="t", arguments={})], live=self.made[-1])


LIVE_SCRIPT = script("await tools.t({}); return 1", tools=["t"], id="live")


async def live_step(service: RunnerService) -> tuple[RemoteRunner, LiveRun]:
    """A RemoteRunner of ``service``, and the live run of a step of :data:`LIVE_SCRIPT`."""
    remote = RemoteRunner([service.address], TOKEN)
    step = await remote.run(LIVE_SCRIPT, live=True)
    assert step.live is not None
    return remote, step.live


async def test_a_live_steps_results_past_the_budget_end_the_process_and_the_client_replays() -> (
    None
):
    """A live step's results line counts against the budget too: past it, the line is read
    to its end, the process ended and the client told it cannot go on (the engine replays
    from its log); the connection takes requests again. With room, results go through."""
    local = _LiveRunner()
    async with services(local, line_memory=BUDGET) as [service]:
        remote, live = await live_step(service)
        assert service.live_runs == 1
        first = script_line("// " + "a" * (800 * KiB), id="first")
        a = await holding(service, first[:-100], 700 * KiB)
        big = [Record(name="t", arguments={}, result="r" * (600 * KiB))]
        with pytest.raises(RunError, match=r"cannot go on.*line budget of 1,048,576"):
            await live.resume(big)
        await until(lambda: local.made[0].closed, "the live process to be ended")
        assert service.live_runs == 0 and service.line_bytes > 0
        a.close()
        await until(lambda: service.line_bytes == 0, "the dropped line's share")

        again = await remote.run(LIVE_SCRIPT, live=True)
        assert again.live is not None
        done = await again.live.resume(big)
        assert done.value == 600 * KiB
        assert service.line_bytes == 0
        await remote.aclose()


def tiny_records(count: int) -> list[Record]:
    """Records of a few bytes each, which take far more to decode than their bytes."""
    return [Record(name="t", arguments={}, result=i % 10) for i in range(count)]


def records_line(count: int, id: str = "many") -> bytes:
    """A script line of ``count`` tiny records (:func:`tiny_records`), newline included."""
    many = script("return 1", id=id, records=tiny_records(count))
    return orjson.dumps({"script": {**many.model_dump(exclude_unset=True), "tenant": "t"}}) + b"\n"


async def test_a_line_that_takes_past_the_whole_budget_to_decode_never_fits() -> None:
    """A line is charged what decoding it takes, not its bytes alone: one of many tiny
    records (some 800 bytes each to decode, in a line of 40) is answered that it never fits
    (``unfit``), naming what decoding it takes, the budget and --line-memory, its connection
    in step; a line of as many bytes of text is taken. (A service took such lines whole: one
    of 14 million records took 11 GB; then answered them busy, "send the line again
    shortly", and the engine sent it again until its queue timeout.)"""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        line = records_line(10_000)
        assert len(line) < 600 * KiB  # a line of text this long is taken (below)
        client = await welcomed(service.address)
        await client.send(line)
        answer = await client.receive()
        assert answer.get("error", {}).get("cause") == "unfit", answer
        why = answer["error"]["error"]
        assert "decoding the line's" in why and "line budget of 1,048,576 bytes" in why, why
        assert "can never take this line" in why and "a larger --line-memory" in why, why
        assert service.lines_refused == 1 and service.line_bytes == 0

        await client.send(script_line("// " + "a" * len(line), id="text"))
        assert (await client.receive())["step"]["value"] == {"runner": "fake", "id": "text"}
        assert service.line_bytes == 0
        client.close()


async def test_a_line_of_nested_arrays_is_charged_what_decoding_it_takes() -> None:
    """Arrays are charged as lists: a line of 200 KiB whose one record holds 20,000
    ``[[[[[]]]]]`` (some 9 MB to decode) is answered unfit on a budget of 1 MiB. Uncounted, it
    was charged 0.6 MiB and taken: a line of a million of them, 476 MB to decode, 32 MB."""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        nested = [Record(name="t", arguments={}, result=[[[[[]]]]] * 20_000)]
        line = orjson.dumps(
            {"script": {**script("x", records=nested).model_dump(exclude_unset=True)}}
        )
        assert len(line) < 256 * KiB
        client = await welcomed(service.address)
        await client.send(line + b"\n")
        answer = await client.receive()
        assert answer.get("error", {}).get("cause") == "unfit", answer
        assert "decoding the line's" in answer["error"]["error"]
        assert service.lines_refused == 1 and service.line_bytes == 0
        client.close()


async def test_a_line_of_csv_text_is_charged_its_bytes_not_its_commas() -> None:
    """Commas and brackets in a line's strings are no values: a line of 600 KiB whose record
    is CSV text (quoted fields, escaped in JSON) is taken on a budget of 1 MiB. Counted, its
    commas charged it 7 MiB, answered unfit: a step of two 7 MiB tool results failed at once
    and for good on the default budget of 64 MiB, which it had been taken on."""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        csv = [Record(name="t", arguments={}, result='"[{",1,' * 100_000)]
        line = orjson.dumps(
            {"script": {**script("x", id="csv", records=csv).model_dump(exclude_unset=True)}}
        )
        assert 600 * KiB < len(line) < BUDGET
        client = await welcomed(service.address)
        await client.send(line + b"\n")
        answer = await client.receive()
        assert answer.get("step", {}).get("value") == {"runner": "fake", "id": "csv"}, answer
        assert service.lines_refused == 0 and service.line_bytes == 0
        client.close()


def test_a_strings_commas_and_brackets_are_no_values() -> None:
    """Commas and brackets in a line's strings, among escaped quotes and backslashes, are not
    charged as values; those after a string that ends in an escaped backslash are, and so
    are those of a string never closed (no JSON). Scanned again from each escaped quote in
    it, such a string of 512 KiB took 42 s of CPU, and 4 MiB (here) would take 45 minutes,
    past the test's timeout."""
    text = ('a\\",[{' + "y" * 200) * 100
    assert wire.decoding_cost(orjson.dumps([text, text])) == wire.decoding_cost(b'["",""]')
    line = orjson.dumps(["x\\" + "y" * 200, [1, 2]])
    assert wire.decoding_cost(line) == wire.decoding_cost(b'["",[1,2]]') > 0
    open_string = b'["' + (b'\\"' + b"," * 62) * (4 * MiB // 64)
    assert wire.decoding_cost(open_string) == wire._structure(open_string, 0, len(open_string)) // 3


def test_a_csv_text_before_many_records_is_charged_the_records_only() -> None:
    """A results line of a 7 MiB CSV text and 60,000 small records (9.3 MiB; decoding it
    grows memory by some 31 MiB) is charged its records, not the text's commas: decided for
    the whole line by its count of strings, it was charged 73.8 MiB more than its bytes, and
    refused unfit on a budget of 64 MiB."""
    csv = "1,2,3,4,5,6,7,8,9,10\n" * (7 * MiB // 21)
    records = [{"id": i, "name": "ab", "tag": "x"} for i in range(60_000)]
    line = orjson.dumps([csv, records])
    assert wire.decoding_cost(line) == wire.decoding_cost(orjson.dumps(["", records]))
    with wire.LineBudget(64 * MiB).hold() as hold:
        hold.reserve(len(line), wire.decoding_cost(line))


def test_a_line_holding_a_character_past_u_ffff_is_charged_four_bytes_a_byte() -> None:
    """One character past U+FFFF, escaped or in UTF-8, makes its whole text take 4 bytes a
    character: such a line is charged three times its bytes more (16 MiB of commas after an
    emoji, charged nothing, grew memory by 64 MiB). Texts of characters up to U+FFFF, and a
    backslash and ``ud7ff``, are not."""
    commas = "," * MiB
    for line in (
        b'["\\ud83d\\ude00' + commas.encode() + b'"]',
        orjson.dumps(["\U0001f600" + commas]),
    ):
        assert wire.decoding_cost(line) == wire.decoding_cost(b'[""]') + 3 * len(line), line[:20]
    for text in ("\u00e9", "\u4e00", "\\ud7ff", "\\u00e9"):
        line = orjson.dumps([text + commas])
        assert wire.decoding_cost(line) == wire.decoding_cost(b'[""]'), text


async def test_a_draining_service_answers_a_line_that_never_fits_draining() -> None:
    """A draining service answers a line past its whole budget ``draining``, as any script:
    ``unfit`` told the engine no service could take the step, which failed for good, though
    the service that replaces it (with a larger --line-memory, say) may take it."""
    gate = asyncio.Event()
    fake = FakeRunner()
    async with services(fake, line_memory=BUDGET, slots=2) as [service]:
        fake.handler = blocked(gate)
        held = await welcomed(service.address)
        client = await welcomed(service.address)
        await held.send(script_line("return 1", id="in flight"))
        await until(lambda: fake.running == 1, "the step in flight")
        draining = asyncio.create_task(service.drain())
        await until(lambda: service.draining, "the drain")
        await client.send(records_line(10_000))
        answer = await client.receive()
        assert answer.get("error", {}).get("cause") == "draining", answer
        gate.set()
        assert (await held.receive())["step"]["value"] == {"runner": "fake", "id": "in flight"}
        await draining
        held.close()
        client.close()


async def test_a_line_that_takes_past_what_is_left_to_decode_is_refused_busy() -> None:
    """A line of tiny records that the whole budget could decode, sent while another
    connection holds most of it, is answered busy (another service, or later, takes it), not
    unfit; once the other line is gone, it is taken."""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        line = records_line(2400)
        charge = len(line) + wire.decoding_cost(line)
        assert BUDGET // 2 < charge < BUDGET  # within the budget, not what is left of it
        first = script_line("// " + "a" * (800 * KiB), id="first")
        a = await holding(service, first[:-100], 700 * KiB)
        b = await welcomed(service.address)
        await b.send(line)
        answer = await b.receive()
        assert "busy" in answer, answer
        assert "other connections hold" in answer["busy"]["error"]
        assert "send the line again shortly" in answer["busy"]["error"]
        a.close()
        await until(lambda: service.line_bytes == 0, "the dropped line's share to come back")
        await b.send(line)
        assert (await b.receive())["step"]["value"] == {"runner": "fake", "id": "many"}
        b.close()


async def test_the_engine_fails_at_once_a_step_no_service_budget_can_decode() -> None:
    """A step whose line takes more than every service's whole line budget to decode fails
    at once, naming --line-memory, and its service stays in rotation: the engine took the
    service's busy for a wait and sent the step again until its queue timeout."""
    async with services(FakeRunner(), line_memory=BUDGET) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        many = script("return 1", id="many", records=tiny_records(10_000))
        with pytest.raises(RunError, match="a larger --line-memory") as caught:
            await remote.run(many)
        assert caught.value.permanent
        assert not remote.out_of_rotation()
        await remote.aclose()
    # Through the engine, a step no service takes fails at once, not at its queue timeout:
    # the same lasting skip, here of a line over the service's max_line (a script's first
    # step holds no records, and its code's commas are no values; a script may be 256 KiB).
    async with services(FakeRunner(), line_memory=0) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        engine = CodeMode([], runner=remote, retry_delay=5, queue_timeout=600)
        try:
            with pytest.raises(StepUnavailable, match="the service's --line-memory"):
                await engine.run_code("// " + "," * (100 * KiB) + "\nreturn 1")
        finally:
            await engine.aclose()
        assert not remote.out_of_rotation()


async def test_a_live_results_line_that_takes_past_the_budget_to_decode_ends_the_process() -> None:
    """A live step's results line of many tiny values is charged what decoding it takes:
    past the budget, the process is ended and the client told it cannot go on (the engine
    replays from its log), and nothing of the line stays held."""
    local = _LiveRunner()
    async with services(local, line_memory=BUDGET) as [service]:
        remote, live = await live_step(service)
        with pytest.raises(RunError, match=r"cannot go on.*decoding the line's"):
            await live.resume([Record(name="t", arguments={}, result=[{"a": 1}] * 20_000)])
        await until(lambda: local.made[0].closed, "the live process to be ended")
        assert service.live_runs == 0 and service.lines_refused == 1
        await until(lambda: service.line_bytes == 0, "the line's share")
        await remote.aclose()


async def test_the_serve_command_takes_line_memory(tmp_path: Path) -> None:
    """``--line-memory`` takes a size word, and bounds the lines (and max_line) it takes;
    ``--live-memory`` takes one too."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    # --live-memory takes a size word too (it took a bare number of bytes only).
    options = ("--line-memory", "2mb", "--live-memory", "64mb")
    async with service_process(token_file, *options) as (_, address):
        client = await RawClient.connect(address)
        assert (await client.hello())["welcome"]["max_line"] == 2 * MiB + 64 * KiB
        client.close()


async def test_a_live_steps_results_past_max_line_are_not_sent() -> None:
    """A live step's results line longer than the service's max_line would be dropped with
    its connection, and the service taken for gone (out of rotation, a healthy one): the
    client ends the live run instead, says why, and the service takes the next step."""
    local = _LiveRunner()
    async with services(local, line_memory=BUDGET) as [service]:
        remote, live = await live_step(service)
        over = [Record(name="t", arguments={}, result="r" * (BUDGET + 100 * KiB))]
        with pytest.raises(RunError, match=r"over the 1,114,112 the runner service .* takes"):
            await live.resume(over)
        await until(lambda: local.made[0].closed, "the live process to be ended")
        again = await remote.run(LIVE_SCRIPT, live=True)  # in rotation: not "out of rotation"
        assert again.live is not None
        assert (await again.live.resume([Record(name="t", arguments={}, result="x")])).value == 1
        await remote.aclose()


async def test_a_live_results_line_that_never_ends_is_named_so() -> None:
    """A client that begins its results line in time and never ends it has its live process
    ended after the service's line timeout, and is told that (it was told 'no results came
    within' the live wait, a minute after they began to come)."""
    local = _LiveRunner()
    async with services(local, live_wait=0.5, line_timeout=1.0) as [service]:
        remote = RemoteRunner([service.address], TOKEN)
        step = await remote.run(script("await tools.t({}); return 1", tools=["t"]), live=True)
        live = step.live
        assert isinstance(live, RemoteLive)
        await live.conn.send(b'{"results": [')  # and nothing more
        answer = await live.conn.line(1 << 20, idle=10, timeout=10)
        assert answer is not None
        assert b"its results line began within 0.5 s but did not end within 1 s more" in answer
        await until(lambda: local.made[0].closed, "the live process to be ended")
        await remote.aclose()


async def test_a_script_waiting_for_a_slot_or_running_keeps_its_share() -> None:
    """The script a line made is held while it waits for a slot and while its step runs:
    the line's share of the budget comes back only once the step is answered, so peers whose
    scripts wait for slots cannot make the service hold more than the budget."""
    gate = asyncio.Event()
    async with services(FakeRunner(blocked(gate)), line_memory=BUDGET, slots=1) as [service]:
        small = await welcomed(service.address)
        await small.send(script_line("return 1", id="small"))
        await until(lambda: service.slots.in_use == 1, "the small step to take the slot")

        waiting = await welcomed(service.address)
        first = script_line("// " + "a" * (800 * KiB), id="first")
        await waiting.send(first)
        await until(lambda: service.slots.waiting() == 1, "the big step to wait for a slot")
        assert service.line_bytes >= 700 * KiB

        other = await welcomed(service.address)
        await other.send(script_line("// " + "b" * (600 * KiB), id="second"))
        answer = await other.receive()
        assert "busy" in answer, answer
        assert "line budget" in answer["busy"]["error"]

        gate.set()
        assert (await small.receive())["step"]["value"]["id"] == "small"
        assert (await waiting.receive())["step"]["value"]["id"] == "first"
        await until(lambda: service.line_bytes == 0, "the share to come back")
        await other.send(script_line("// " + "b" * (600 * KiB), id="again"))
        assert (await other.receive())["step"]["value"]["id"] == "again"
        for client in (small, waiting, other):
            client.close()


async def test_a_step_one_service_can_never_take_runs_on_another_that_can(
    tmp_path: Path,
) -> None:
    """Of a service process of a small budget and one of a large, whichever comes first, a
    step whose line the small one can never take runs on the large one; the small one stays
    in rotation and takes small steps (its unfit is about the step, not the service)."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    code = "let s = 0; for (let i = 0; i < 10000; i++) s += await tools.t({}); return s"
    many = script(code, id="many", tools=["t"], records=tiny_records(10_000))
    async with (
        service_process(token_file, "--line-memory", "1mb") as (_, little),
        service_process(token_file, "--line-memory", "64mb") as (_, big),
    ):
        for order in ([little, big], [big, little]):
            remote = RemoteRunner(order, TOKEN)
            try:
                for _ in range(4):  # each service comes first in turn
                    assert (await remote.run(many)).value == 45_000
                    assert remote.out_of_rotation() == {}
                for _ in range(2):
                    assert (await remote.run(script("return 2"))).value == 2
                status = remote.status()
            finally:
                await remote.aclose()
            assert status[big]["steps"] + status[little]["steps"] == 6, status
            assert status[big]["steps"] >= 4 and status[little]["steps"] >= 1, status
            assert status[big]["failures"] == status[little]["failures"] == 0, status
