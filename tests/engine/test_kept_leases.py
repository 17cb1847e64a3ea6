"""A lease this host may still hold when the log stops answering (its release failed) is
kept aside and given up once the log answers, whatever gave the lease up (a keyed start, a
refused script, a drive), on one event loop after another, and not tried again at once
against a log that has just failed."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from engine import (
    CodeMode,
    MemoryStore,
    SqliteStore,
    StoreUnavailable,
    _codemode,
    _drive,
    log,
    tool,
)
from tests.engine.conftest import InProcessRunner, given_up

LONG_MS = 600_000  # a lease far longer than any test: given up, never left to run out
SCRIPT = "return await tools.pay({ n: 1 });"


@tool(needs_approval=True)
def pay(n: int) -> int:
    """Pay ``n``."""
    return n


class FailingStore(MemoryStore):
    """A log in memory whose chosen methods fail as a log that does not answer does, while
    ``down`` names them; counts the releases tried."""

    def __init__(self) -> None:
        super().__init__()
        self.down: set[str] = set()
        self.releases = 0

    def _answer(self, what: str) -> None:
        if what in self.down:
            raise StoreUnavailable(f"{what}: the log did not answer")

    async def calls(self, script_id: str, start: int = 0) -> list[log.CallEntry]:
        self._answer("calls")
        return await super().calls(script_id, start)

    async def release(self, lease: log.Lease) -> None:
        self.releases += 1
        self._answer("release")
        await super().release(lease)

    async def end(self, lease: log.Lease, *args: Any, **kwargs: Any) -> None:
        self._answer("end")
        await super().end(lease, *args, **kwargs)


def engine_on(store: MemoryStore, **options: Any) -> CodeMode:
    options.setdefault("type_check", "off")
    return CodeMode([pay], runner=InProcessRunner(), store=store, lease_ms=LONG_MS, **options)


async def test_a_keyed_start_of_a_script_in_the_log_keeps_the_lease_its_read_left() -> None:
    """run_code with the key of a paused script takes its lease and reads it; the read fails
    and so does the release (the log stopped answering): the lease is given up once the log
    answers, not held for the whole lease."""
    store = FailingStore()
    engine = engine_on(store)
    try:
        first = await engine.run_code(SCRIPT, key="k1")
        assert first.status == "paused", first.text
        store.down = {"calls", "release"}
        with pytest.raises(StoreUnavailable, match="calls: the log did not answer"):
            await engine.run_code(SCRIPT, key="k1")
        store.down = set()
        assert (await given_up(store, first.script_id)).token == 2  # the keyed start's
    finally:
        await engine.aclose()


async def test_a_refused_script_whose_end_and_release_fail_gives_its_lease_up() -> None:
    """A script the type check refuses ends as the log stops answering: its end fails, then
    its release. The lease is given up once the log answers (a close outside a drive kept
    none aside: the script stayed held for the whole lease)."""
    store = FailingStore()
    engine = engine_on(store, type_check="on")
    try:
        store.down = {"end", "release"}
        with pytest.raises(StoreUnavailable, match="end: the log did not answer"):
            await engine.run_code('return await tools.pay({ n: "one" });')
        store.down = set()
        (record,) = await store.scripts()
        assert (await given_up(store, record.id)).token == 1
    finally:
        await engine.aclose()


async def test_a_lease_kept_as_the_giving_back_task_ends_is_given_up() -> None:
    """A lease kept in the loop turn between the end of the task that gave the kept leases
    up and its done callback gets a task of its own (it saw a task, ended, and started none:
    the lease was held for the whole lease)."""
    store = FailingStore()
    engine = engine_on(store)
    try:
        a = await engine.run_code(SCRIPT)
        b = await engine.run_code("return await tools.pay({ n: 2 });")
        lease_a = await store.acquire(a.script_id, "host-x", LONG_MS)
        lease_b = await store.acquire(b.script_id, "host-y", LONG_MS)
        assert lease_a is not None and lease_b is not None
        release = store.release

        async def release_then_keep(lease: log.Lease) -> None:
            await release(lease)
            if lease.script_id == a.script_id:
                # A drive whose release failed keeps its lease in the same loop turn as the
                # task ends, ahead of the task's done callback.
                asyncio.get_running_loop().call_soon(engine._keep, lease_b)

        store.release = release_then_keep  # type: ignore[method-assign]
        engine._keep(lease_a)
        assert (await given_up(store, a.script_id)).token == lease_a.token
        assert (await given_up(store, b.script_id)).token == lease_b.token
    finally:
        await engine.aclose()


def test_kept_leases_are_given_up_on_one_event_loop_after_another() -> None:
    """One engine, one asyncio.run after another (a host's per request): a drive's lease
    kept on the second loop is given up too (the wake-up was bound to the first loop, and
    the task that gives leases up died on the second)."""
    store = FailingStore()
    engine = engine_on(store)

    async def drive_and_wait() -> None:
        store.down, store.releases = {"release"}, 0
        result = await engine.run_code(SCRIPT)
        assert result.status == "paused", result.text
        while store.releases < 2:  # the drive's, then a try of the kept lease's, fail
            await asyncio.sleep(0.05)
        store.down = set()
        await given_up(store, result.script_id)

    try:
        asyncio.run(drive_and_wait())
        asyncio.run(drive_and_wait())
    finally:
        asyncio.run(engine.aclose())


async def test_a_drive_whose_release_failed_does_not_wake_the_giving_back_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drive whose own release fails keeps its lease, and the kept leases are tried again
    only after the pause, not at once against the log that has just failed."""
    monkeypatch.setattr(_codemode, "KEPT_RETRY_FIRST_S", 3600.0)  # no try but a wake-up
    store = FailingStore()
    engine = engine_on(store)
    try:
        store.down = {"release"}
        result = await engine.run_code(SCRIPT)
        assert result.status == "paused", result.text
        assert store.releases == 1
        await asyncio.sleep(0.5)  # a wake-up would have tried by now, many times over
        assert store.releases == 1, "the kept lease was tried again at once"
        lease = (await store.get_script(result.script_id)).lease
        assert lease is not None and lease.expires_ms != 0  # still kept, not given up
    finally:
        await engine.aclose()


@tool
async def slow(n: int) -> int:
    """Answer ``n`` in a minute."""
    await asyncio.sleep(60)
    return n


def test_a_request_whose_loop_ended_as_the_log_failed_leaves_the_next_one_working() -> None:
    """One engine, asyncio.run per request: a request's loop ends with a drive under way as
    the log stops answering, so the drive's lease is kept and the task that gives it up is
    made on that loop as it ends. The next request's run_code finished in the log and then
    raised 'Event loop is closed' (its wake-up of the old loop's task), and aclose raised the
    same, closing nothing after it."""
    store = FailingStore()
    engine = CodeMode([slow], runner=InProcessRunner(), store=store, lease_ms=LONG_MS)
    first: list[str] = []

    async def request() -> None:
        run = asyncio.create_task(engine.run_code("return await tools.slow({ n: 1 });"))
        while not first:
            first.extend(s.id for s in await store.scripts())
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the call runs
        store.down = {"release"}
        assert not run.done()  # asyncio.run cancels it as the loop ends

    async def next_request() -> str:
        result = await engine.run_code("return 1;")
        await given_up(store, first[0])  # on this loop
        return result.status

    asyncio.run(request())
    store.down = set()
    try:
        assert asyncio.run(next_request()) == "finished"
    finally:
        asyncio.run(engine.aclose())
    assert engine._giving_back is None


async def test_a_release_the_caller_cancelled_keeps_the_lease() -> None:
    """The caller cancels run_code (its timeout) while the drive's release waits on a log
    that does not answer: the lease was neither given up nor kept, so it held the script for
    the whole lease; it is kept, and given up once the log answers."""

    class Stalling(FailingStore):
        stalled: asyncio.Event | None = None

        async def release(self, lease: log.Lease) -> None:
            if self.stalled is not None:
                self.stalled.set()
                await asyncio.sleep(3600)
            await super().release(lease)

    store = Stalling()
    engine = engine_on(store)
    try:
        store.stalled = stalled = asyncio.Event()
        run = asyncio.create_task(engine.run_code(SCRIPT))
        await stalled.wait()  # the drive paused for approval, and gives its lease up
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        store.stalled = None
        (record,) = await store.scripts()
        await given_up(store, record.id)
    finally:
        await engine.aclose()


class WriteLocked:
    """Another host's connection holding the SQLite log's write lock (``BEGIN IMMEDIATE``)
    while in the ``with``: the store's writes then wait on its thread for it."""

    def __init__(self, store: SqliteStore) -> None:
        self.db = sqlite3.connect(store.path, isolation_level=None)

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, *exc: object) -> None:
        self.db.execute("COMMIT")
        self.db.close()


async def held_by_another(store: log.LogStore, script_id: str, than: str | None) -> log.Lease:
    """Wait (at most a minute) until the script is held under an owner other than ``than``."""
    for _ in range(1200):
        lease = (await store.get_script(script_id)).lease
        if lease is not None and lease.expires_ms > 0 and lease.owner != than:
            return lease
        await asyncio.sleep(0.05)
    raise AssertionError(f"script {script_id} was never taken")


async def test_a_take_the_caller_cancelled_while_the_log_was_locked_gives_its_lease_up(
    tmp_path: Path,
) -> None:
    """A resume, and a keyed start of a script in the log, cancelled (the caller's timeout)
    while another host held the SQLite log's write lock: their take went through once the
    lock was let go, under an owner nobody had any more, and held the script from every host
    (this one too: the next resume was "elsewhere") for the whole lease. The lease is given
    up, and the next resume and keyed start drive the script."""

    class Taking(SqliteStore):
        taking: asyncio.Event | None = None  # set as a take begins

        async def acquire(self, *args: Any, **kwargs: Any) -> Any:
            if self.taking is not None:
                self.taking.set()
            return await super().acquire(*args, **kwargs)

        async def start(self, *args: Any, **kwargs: Any) -> Any:
            if self.taking is not None:
                self.taking.set()
            return await super().start(*args, **kwargs)

    store = Taking(tmp_path)
    engine = CodeMode([pay], runner=InProcessRunner(), store=store, lease_ms=LONG_MS)
    try:
        first = await engine.run_code(SCRIPT, key="k1")
        assert first.status == "paused", first.text
        before = (await store.get_script(first.script_id)).lease
        assert before is not None
        for again in (
            lambda: engine.resume(first.script_id),
            lambda: engine.run_code(SCRIPT, key="k1"),
        ):
            with WriteLocked(store):
                store.taking = taking = asyncio.Event()
                caller = asyncio.create_task(again())
                await taking.wait()
                for _ in range(3):  # to the store's thread, which waits for the lock
                    await asyncio.sleep(0)
                store.taking = None
                caller.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await caller
            taken = await held_by_another(store, first.script_id, before.owner)
            assert (await given_up(store, first.script_id)).token == taken.token
            resumed = await again()
            assert resumed.status == "paused", resumed.text  # driven here, not elsewhere
            before = (await store.get_script(first.script_id)).lease
            assert before is not None
    finally:
        await engine.aclose()


class LostAnswer(FailingStore):
    """A log that takes the lease, or makes the script, and fails as it answers (its
    connection lost with the commit's reply) while ``down`` names the method; with ``gate``
    set, a take first waits for it; with ``landing``, the next take fails at once and commits
    only when ``landing`` is set (a server still committing when the answer was given up)."""

    gate: asyncio.Event | None = None
    at_gate = asyncio.Event()  # a take waits at the gate
    landing: asyncio.Event | None = None
    landed: asyncio.Future[None] | None = None  # the late commit

    async def acquire(self, script_id: str, owner: str, *args: Any, **kw: Any) -> Any:
        if self.gate is not None:
            self.at_gate.set()
            await self.gate.wait()
        if self.landing is not None:
            landing = self.landing
            self.landing = None

            async def land() -> None:
                await landing.wait()
                await super(LostAnswer, self).acquire(script_id, owner, *args, **kw)

            self.landed = asyncio.ensure_future(land())
            raise StoreUnavailable("acquire: the log did not answer (still committing)")
        lease = await super().acquire(script_id, owner, *args, **kw)
        self._answer("acquire")
        return lease

    async def start(self, *args: Any, **kwargs: Any) -> Any:
        started = await super().start(*args, **kwargs)
        self._answer("start")
        return started


async def test_a_take_whose_answer_was_lost_is_given_up_if_it_went_through() -> None:
    """The log takes the lease and fails as it answers (its connection lost with the
    commit's reply): the host does not know it holds the script. It looks the lease up by
    its owner once the log answers, and gives it up; a take that did not go through leaves
    the lease another host holds alone."""
    store = LostAnswer()
    engine = engine_on(store)
    try:
        first = await engine.run_code(SCRIPT)
        store.down = {"acquire"}
        with pytest.raises(StoreUnavailable, match="acquire: the log did not answer"):
            await engine.resume(first.script_id)
        store.down = set()
        assert (await given_up(store, first.script_id)).token == 2
        assert (await engine.resume(first.script_id)).status == "paused"
        # Taken by another host meanwhile: this host's lost take did not go through, and
        # the other host's lease stays.
        other = await store.acquire(first.script_id, "other-host", LONG_MS)
        assert other is not None
        store.down = {"acquire"}
        with pytest.raises(StoreUnavailable):
            await engine.resume(first.script_id)
        store.down = set()
        await engine._give_back()
        assert (await store.get_script(first.script_id)).lease == other
    finally:
        await engine.aclose()


async def test_a_lost_take_is_given_up_whether_the_caller_waited_and_whenever_it_lands() -> None:
    """A take whose answer is lost is given up too when its caller had left (cancelled
    while the take waited), when it is a keyed start (the call a host retries), and when
    the log commits it only after the host first looked for it."""
    store = LostAnswer()
    engine = engine_on(store)
    try:
        first = await engine.run_code(SCRIPT)
        # The caller leaves while the take waits; the take lands, and its answer is lost.
        store.gate, store.down = asyncio.Event(), {"acquire"}
        caller = asyncio.create_task(engine.resume(first.script_id))
        await store.at_gate.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        store.gate.set()
        taken = await held_by_another(store, first.script_id, None)
        store.down, store.gate = set(), None
        assert (await given_up(store, first.script_id)).token == taken.token
        # A keyed start that made its script, its answer lost: the retry drives it.
        store.down = {"start"}
        with pytest.raises(StoreUnavailable, match="start: the log did not answer"):
            await engine.run_code(SCRIPT, key="k9")
        store.down = set()
        assert (await engine.run_code(SCRIPT, key="k9")).status == "paused"
        # Again, now that the key names a script in the log: the take was of that script.
        store.down = {"start"}
        with pytest.raises(StoreUnavailable, match="start: the log did not answer"):
            await engine.run_code(SCRIPT, key="k9")
        store.down = set()
        again = await engine.run_code(SCRIPT, key="k9")
        assert again.status == "paused", again.text
        # The take commits after the host first looked it up and found nothing.
        store.landing = landing = asyncio.Event()
        with pytest.raises(StoreUnavailable, match="still committing"):
            await engine.resume(first.script_id)
        await engine._give_back()  # nothing held yet: looked up again later
        landing.set()
        taken = await held_by_another(store, first.script_id, None)
        assert (await given_up(store, first.script_id)).token == taken.token
        assert (await engine.resume(first.script_id)).status == "paused"
    finally:
        await engine.aclose()


async def test_a_drives_kept_lease_and_a_later_lost_take_of_its_script_are_both_given_up() -> None:
    """A drive's lease kept as the log stopped answering, then a take of the same script
    whose answer was lost: the second no longer replaces the first, which was then never
    given up."""
    store = LostAnswer()
    engine = engine_on(store)
    try:
        first = await engine.run_code(SCRIPT)
        held = await store.acquire(first.script_id, "drive-1", LONG_MS)
        assert held is not None
        engine._keep(held)
        engine._keep(log.Lease(first.script_id, "take-2", _drive.LOST_TAKE, 0))
        assert (await given_up(store, first.script_id)).token == held.token
        assert (await engine.resume(first.script_id)).status == "paused"
    finally:
        await engine.aclose()


async def test_a_script_a_stopping_worker_claimed_is_given_up_once_the_log_answers() -> None:
    """A worker claims a ready script just as it is told to stop, and leaves it for another
    host; the release fails (the log stopped answering): the lease is kept, and given up
    once the log answers, not held for the whole lease."""

    class StopOnClaim(FailingStore):
        stop = asyncio.Event()

        async def claim_ready(self, *args: Any, **kwargs: Any) -> Any:
            lease = await super().claim_ready(*args, **kwargs)
            if lease is not None:
                self.down = {"release"}
                self.stop.set()
            return lease

    store = StopOnClaim()
    engine = engine_on(store)
    try:
        first = await engine.run_code(SCRIPT)
        await engine.approve(first.script_id, first.waiting[0]["call_id"])
        await engine.work(stop=store.stop)
        taken = await store.get_script(first.script_id)
        assert taken.status == "paused" and taken.lease is not None and taken.lease.token == 2
        assert taken.lease.expires_ms > 0 and store.releases >= 1  # tried, and kept
        store.down = set()
        assert (await given_up(store, first.script_id)).token == 2
    finally:
        await engine.aclose()


async def test_a_keyed_starts_lost_take_is_looked_up_only_for_its_key() -> None:
    """A keyed start whose take did not go through, its answer lost, is looked up by its
    key when a script of that key is resumed or started again, not at every resume of any
    script (each read the log twice more, and the resume of another script failed while the
    key's look-up did not answer)."""

    class KeyDown(LostAnswer):
        async def script_by_key(self, tenant: str, key: str) -> Any:
            self._answer("script_by_key")
            return await super().script_by_key(tenant, key)

        async def start(self, *args: Any, **kwargs: Any) -> Any:
            self._answer("start")  # before it writes anything: it did not go through
            return await super(LostAnswer, self).start(*args, **kwargs)

    store = KeyDown()
    engine = engine_on(store)
    try:
        other = await engine.run_code(SCRIPT)
        store.down = {"start"}
        with pytest.raises(StoreUnavailable, match="start: the log did not answer"):
            await engine.run_code(SCRIPT, key="k7")
        store.down = {"script_by_key"}
        assert (await engine.resume(other.script_id)).status == "paused"
    finally:
        await engine.aclose()
