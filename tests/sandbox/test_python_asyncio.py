"""asyncio in Python scripts (sandbox/python.py): tasks that can be cancelled, task groups,
semaphores, locks, events, queues, ``wait``, ``as_completed``, ``wait_for``, ``shield``.

Each works as CPython's asyncio does, on the sandbox's own scheduler; every script here is
run step by step both live and by replay, which must agree byte for byte (the order of the
calls, what is printed, the value), as the engine's log requires.
"""

from __future__ import annotations

from typing import Any

import pytest

from sandbox import protocol
from sandbox.protocol import Ran, Record
from tests.sandbox.test_live import live_steps, outcome, replay_steps
from tests.sandbox.test_python import pyscript, run


def answer(name: str, arguments: dict[str, Any]) -> Record:
    """``fail`` in the arguments makes an error; anything else is echoed."""
    if arguments.get("fail"):
        return Record(name=name, arguments=arguments, error=f"{name} refused {arguments}")
    return Record(name=name, arguments=arguments, result={"echo": arguments})


def steps(code: str) -> list[Ran]:
    """Every step of ``code``, after checking that live and replay agree on each."""
    s = pyscript(code, tools=["t"], version=protocol.LIVE_VERSION)
    replayed = replay_steps(s, answer)
    lived = live_steps(s, answer)
    assert [outcome(r) for r in lived] == [outcome(r) for r in replayed]
    return replayed


def failed(code: str) -> protocol.ScriptError:
    """The error ``code`` ends with (after the calls it makes first)."""
    ran = steps(code)[-1]
    assert ran.outcome == "failed" and ran.error is not None, ran
    return ran.error


def end(code: str) -> Ran:
    return steps(code)[-1]


def calls_per_step(code: str) -> list[list[dict[str, Any]]]:
    return [[c.arguments for c in r.calls] for r in steps(code) if r.outcome == "calls"]


# ---- semaphores, locks, events ----

SEMAPHORE = """
import asyncio
sem = asyncio.Semaphore(2)
inside = peak = 0
async def one(i):
    nonlocal inside, peak
    async with sem:
        inside += 1
        peak = max(peak, inside)
        r = await tools.t(i=i)
        inside -= 1
        return r["echo"]["i"]
return [await asyncio.gather(*[one(i) for i in range(5)]), peak, sem.locked()]
"""


def test_a_semaphore_lets_n_calls_run_at_once_in_the_order_they_came() -> None:
    assert calls_per_step(SEMAPHORE) == [[{"i": 0}, {"i": 1}], [{"i": 2}, {"i": 3}], [{"i": 4}]]
    assert end(SEMAPHORE).value == [[0, 1, 2, 3, 4], 2, False]


def test_a_bounded_semaphore_refuses_a_release_too_many() -> None:
    code = "import asyncio\ns = asyncio.BoundedSemaphore(1)\nawait s.acquire()\ns.release()\ns.release()"
    assert failed(code).message == "BoundedSemaphore released too many times"
    assert failed("import asyncio\nasyncio.Semaphore(-1)").message == (
        "Semaphore initial value must be an int >= 0, not -1"
    )


def test_a_lock_and_an_event() -> None:
    code = """
import asyncio
ready = asyncio.Event()
lock = asyncio.Lock()
order = []
async def worker(n):
    await ready.wait()
    async with lock:
        order.append(n)
        await tools.t(n=n)
        order.append(-n)
tasks = [asyncio.create_task(worker(n)) for n in (1, 2, 3)]
await asyncio.sleep(0)
order.append(ready.is_set())
ready.set()
await asyncio.gather(*tasks)
return [order, lock.locked()]
"""
    assert calls_per_step(code) == [[{"n": 1}], [{"n": 2}], [{"n": 3}]]
    assert end(code).value == [[False, 1, -1, 2, -2, 3, -3], False]
    assert failed("import asyncio\nasyncio.Lock().release()").message == "Lock is not acquired."


def test_a_waiter_cancelled_in_line_gives_its_turn_to_the_next() -> None:
    code = """
import asyncio
sem = asyncio.Semaphore(1)
got = []
async def take(n):
    async with sem:
        got.append(n)
        await tools.t(n=n)
first = asyncio.create_task(take(1))
second = asyncio.create_task(take(2))
third = asyncio.create_task(take(3))
await asyncio.sleep(0)
second.cancel()
await asyncio.gather(first, third, return_exceptions=True)
return [got, second.cancelled(), sem.locked()]
"""
    assert end(code).value == [[1, 3], True, False]


# ---- queues ----

WORKERS = """
import asyncio
q = asyncio.Queue()
for i in range(5):
    q.put_nowait(i)
done = []
async def worker(w):
    while True:
        i = await q.get()
        try:
            r = await tools.t(i=i, w=w)
            done.append(r["echo"]["i"])
        finally:
            q.task_done()
workers = [asyncio.create_task(worker(w)) for w in range(2)]
await q.join()
for w in workers:
    w.cancel()
ends = await asyncio.gather(*workers, return_exceptions=True)
return [done, [type(e).__name__ for e in ends], q.empty()]
"""


def test_a_queue_of_work_for_two_workers_joined_then_cancelled() -> None:
    assert calls_per_step(WORKERS) == [
        [{"i": 0, "w": 0}, {"i": 1, "w": 1}],
        [{"i": 2, "w": 0}, {"i": 3, "w": 1}],
        [{"i": 4, "w": 0}],
    ]
    assert end(WORKERS).value == [[0, 1, 2, 3, 4], ["CancelledError", "CancelledError"], True]


def test_a_bounded_queue_waits_to_put_and_the_kinds_of_queue() -> None:
    code = """
import asyncio
q = asyncio.Queue(maxsize=1)
out = []
async def produce():
    for i in range(3):
        await q.put(i)
        out.append(("put", i))
async def consume():
    for _ in range(3):
        out.append(("got", await q.get()))
await asyncio.gather(produce(), consume())
p = asyncio.PriorityQueue()
for x in (3, 1, 2):
    p.put_nowait(x)
l = asyncio.LifoQueue()
for x in (3, 1, 2):
    l.put_nowait(x)
try:
    asyncio.Queue(maxsize=1).get_nowait()
except asyncio.QueueEmpty:
    out.append("empty")
full = asyncio.Queue(maxsize=1)
full.put_nowait(1)
try:
    full.put_nowait(2)
except asyncio.QueueFull:
    out.append(["full", full.full(), full.qsize(), full.maxsize])
return [out, [p.get_nowait() for _ in range(3)], [l.get_nowait() for _ in range(3)]]
"""
    assert end(code).value == [
        [["put", 0], ["got", 0], ["put", 1], ["got", 1], ["put", 2], ["got", 2], "empty",
         ["full", True, 1, 1]],
        [1, 2, 3],
        [2, 1, 3],
    ]  # fmt: skip


# ---- task groups ----


def test_a_task_group_waits_for_its_tasks() -> None:
    code = """
import asyncio
async def two(n):
    a = await tools.t(n=n)
    return [a, await tools.t(n=n + 10)]
async with asyncio.TaskGroup() as tg:
    x = tg.create_task(two(1))
    y = tg.create_task(tools.t(n=2))
return [x.result(), y.result(), x.done()]
"""
    assert calls_per_step(code) == [[{"n": 2}, {"n": 1}], [{"n": 11}]]
    assert end(code).value == [
        [{"echo": {"n": 1}}, {"echo": {"n": 11}}],
        {"echo": {"n": 2}},
        True,
    ]


TASK_GROUP_FAILS = """
import asyncio
async def slow():
    await tools.t(n=1)
    await tools.t(n=2)
    return "slow"
after = []
try:
    async with asyncio.TaskGroup() as tg:
        s = tg.create_task(slow())
        tg.create_task(tools.t(fail=True))
        await tools.t(body=1)
        after.append("body went on")
except* ToolError as group:
    print("caught", [str(e) for e in group.exceptions])
return [after, s.cancelled()]
"""


def test_a_failure_in_a_task_group_cancels_the_others_and_the_block() -> None:
    """The first failure cancels the group's other tasks and the block where it waits (no
    call after it is made) and the block ends with an ExceptionGroup, which `except*`
    takes; no line says a failure went unawaited (the group took it)."""
    assert calls_per_step(TASK_GROUP_FAILS) == [[{"fail": True}, {"body": 1}, {"n": 1}]]
    ran = end(TASK_GROUP_FAILS)
    assert ran.value == [[], True]
    assert ran.printed == "caught [\"t refused {'fail': True}\"]\n"


def test_an_uncaught_task_group_failure_names_its_errors_and_lines() -> None:
    code = """import asyncio
async def bad(n):
    await tools.t(n=n)
    raise ValueError(f"no {n}")
async with asyncio.TaskGroup() as tg:
    tg.create_task(bad(1))
    tg.create_task(bad(2))
return 1"""
    ran = end(code)
    assert ran.error is not None
    assert ran.error.name == "ExceptionGroup"
    # Both failed in the same step, so both are the group's (as in CPython, whose done
    # callbacks run after the ready tasks): the first does not cancel the second.
    assert ran.error.message == (
        "unhandled errors in a TaskGroup (2 sub-exceptions): ValueError: no 1; ValueError: no 2"
    )
    assert [x.line for x in ran.error.lines] == [4, 5]


def test_a_task_group_refuses_tasks_outside_its_block() -> None:
    assert failed("import asyncio\nasyncio.TaskGroup().create_task(tools.t(a=1))").message == (
        "TaskGroup has not been entered: write `async with asyncio.TaskGroup() as tg:`"
    )
    code = """import asyncio
async with asyncio.TaskGroup() as tg:
    pass
async def f():
    return 1
tg.create_task(f())"""
    assert failed(code).message == "TaskGroup is finished"


# ---- wait, as_completed, wait_for, shield ----


def test_as_completed_gives_results_in_the_order_they_finish() -> None:
    code = """
import asyncio
async def two(n):
    await tools.t(n=n)
    return (await tools.t(n=n + 10))["echo"]["n"]
async def one(n):
    return (await tools.t(n=n))["echo"]["n"]
return [await c for c in asyncio.as_completed([two(1), one(2), one(3)])]
"""
    assert end(code).value == [2, 3, 11]


def test_wait_returns_done_and_pending_in_the_same_order_live_and_replayed() -> None:
    """The sets asyncio.wait returns iterate in the same order in every process that runs the
    script (futures hash by the order the script made them, not by address), so a script that
    loops over them makes its calls in the same order live and replayed."""
    code = """
import asyncio
tasks = [asyncio.create_task(tools.t(k=i)) for i in range(12)]
done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
first = len(done)
done, pending = await asyncio.wait(tasks)
again = [await tools.t(then=d.result()["echo"]["k"]) for d in done]
return [first, len(pending), [a["echo"]["then"] for a in again]]
"""
    ran = end(code)
    assert ran.value[:2] == [12, 0]
    assert sorted(ran.value[2]) == list(range(12))


def test_wait_first_exception_and_its_refusals() -> None:
    code = """
import asyncio
async def later():
    await tools.t(a=1)
    return await tools.t(a=2)
tasks = [asyncio.create_task(later()), asyncio.create_task(tools.t(fail=True))]
done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
errors = [str(t.exception()) for t in done]
for t in pending:
    t.cancel()
return [errors, len(pending)]
"""
    assert end(code).value == [["t refused {'fail': True}"], 1]
    assert failed("import asyncio\nawait asyncio.wait([])").message == (
        "Set of Tasks/Futures is empty."
    )
    assert failed("import asyncio\nawait asyncio.wait(tools.t(a=1))").message == (
        "asyncio.wait takes a list of awaitables, not one: write asyncio.wait([tools.t(...)])"
    )
    assert failed(
        "import asyncio\nawait asyncio.wait([tools.t(a=1)], return_when='x')"
    ).message == ("Invalid return_when value: x")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("time.sleep('1')", "'str' object cannot be interpreted as an integer"),
        ("time.sleep(-1)", "sleep length must be non-negative"),
        ("time.sleep(float('nan'))", "Invalid value NaN (not a number)"),
        ("await asyncio.sleep('1')", "'<=' not supported between instances of 'str' and 'int'"),
    ],
)
def test_a_sleep_of_a_wrong_length_fails_as_in_python(call: str, message: str) -> None:
    """Sleeping waits for nothing in a script, but a wrong length was taken silently: the
    script's mistake went unseen until it ran where time passes."""
    assert failed(f"import asyncio, time\n{call}").message == message
    assert (
        end(
            "import asyncio, time\ntime.sleep(0.5)\ntime.sleep(True)\nawait asyncio.sleep(-1)\nreturn 1"
        ).value
        == 1
    )


def test_timeouts_never_fire_and_shield_keeps_a_call_from_its_cancellation() -> None:
    """No time passes in a script (its clock is fixed, time.sleep returns at once), so
    wait_for and asyncio.timeout wait for what they are given."""
    code = """
import asyncio
a = await asyncio.wait_for(tools.t(a=1), timeout=0.001)
async with asyncio.timeout(0) as cm:
    b = await tools.t(b=1)
inner = asyncio.create_task(tools.t(c=1))
outer = asyncio.shield(inner)
outer.cancel()
return [a, b, cm.expired(), outer.cancelled(), await inner]
"""
    assert end(code).value == [
        {"echo": {"a": 1}},
        {"echo": {"b": 1}},
        False,
        True,
        {"echo": {"c": 1}},
    ]


# ---- a task's methods and its cancellation ----


def test_a_tasks_methods() -> None:
    code = """
import asyncio
async def f():
    return await tools.t(a=1)
t = asyncio.create_task(f())
u = asyncio.create_task(tools.t(fail=True))
early = t.done()
try:
    t.result()
except asyncio.InvalidStateError as e:
    early = [early, str(e)]
await asyncio.gather(t, u, return_exceptions=True)
return [early, t.done(), t.result(), t.exception(), str(u.exception()), t.cancelled()]
"""
    assert end(code).value == [
        [False, "asyncio.create_task(f(...)) has no result yet: await it for its result"],
        True,
        {"echo": {"a": 1}},
        None,
        "t refused {'fail': True}",
        False,
    ]


def test_cancelling_a_task_raises_where_it_waits_and_it_may_clean_up() -> None:
    """The cancelled task's call was made (and stays in the log); the task sees
    CancelledError where it waits, runs its `finally`, and is no failure to report."""
    code = """
import asyncio
log = []
async def job():
    try:
        await tools.t(a=1)
        log.append("never")
    except asyncio.CancelledError:
        log.append("cancelled")
        raise
    finally:
        log.append("finally")
t = asyncio.create_task(job())
await asyncio.sleep(0)
first = t.cancel()
try:
    await t
except asyncio.CancelledError:
    log.append("awaited")
return [first, t.cancel(), t.cancelled(), log, await tools.t(b=1)]
"""
    assert calls_per_step(code) == [[{"a": 1}, {"b": 1}]]
    ran = end(code)
    assert ran.value == [True, False, True, ["cancelled", "finally", "awaited"], {"echo": {"b": 1}}]
    assert ran.printed == ""


def test_a_task_cancelled_before_it_starts_never_runs() -> None:
    code = """
import asyncio
ran = []
async def job():
    ran.append(1)
    await tools.t(a=1)
t = asyncio.create_task(job())
t.cancel()
await asyncio.gather(t, return_exceptions=True)
return [ran, t.cancelled()]
"""
    assert steps(code)[0].value == [[], True]


def test_a_task_catching_its_cancellation_goes_on() -> None:
    code = """
import asyncio
async def stubborn():
    try:
        await tools.t(a=1)
    except asyncio.CancelledError:
        return await tools.t(a=2)
t = asyncio.create_task(stubborn())
await asyncio.sleep(0)
t.cancel()
return [await t, t.cancelled()]
"""
    assert end(code).value == [{"echo": {"a": 2}}, False]


def test_a_method_asyncio_has_and_scripts_do_not_says_what_they_have() -> None:
    error = failed(
        "import asyncio\nt = asyncio.create_task(tools.t(a=1))\nt.add_done_callback(print)"
    )
    assert error.message == (
        "tools.t(...) has no attribute 'add_done_callback' in scripts; an awaitable has done(), "
        "result(), exception(), cancel() and cancelled(), and is awaited for its result"
    )


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("import asyncio\nawait asyncio.Event().wait()", 2),
        (
            "import asyncio\nq = asyncio.Queue()\nasync def f():\n    return await q.get()\nawait f()",
            4,
        ),
        ("import asyncio\nlock = asyncio.Lock()\nawait lock.acquire()\nawait lock.acquire()", 4),
    ],
)
def test_a_script_that_waits_for_what_nothing_will_do_says_where(code: str, line: int) -> None:
    error = failed(code)
    assert error.name == "StuckError"
    assert "an Event nothing sets, a Queue nothing fills" in error.message
    assert error.lines[0].line == line


def test_the_scripts_own_sets_of_tasks_iterate_in_one_order() -> None:
    """A set of tasks, as a script builds one: the same order live and replayed (steps()
    checks), and not the order of addresses."""
    code = """
import asyncio
pending = {asyncio.create_task(tools.t(k=i)) for i in range(20)}
out = []
for t in pending:
    out.append((await t)["echo"]["k"])
return out
"""
    value = end(code).value
    assert sorted(value) == list(range(20))
    assert run(code, tools=["t"]).outcome == "calls"


def test_tasks_beside_small_ints_in_a_dict() -> None:
    """Awaitables hash far from the small ints a dict may hold beside them: a tie would
    compare a task with a number, which is refused (a forgotten await)."""
    code = """
import asyncio
tasks = [asyncio.create_task(tools.t(k=i)) for i in range(3)]
d = {i: i for i in range(10)}
for t in tasks:
    d[t] = "task"
return [len(d), tasks[0] in {0, 1, 2}, [(await t)["echo"]["k"] for t in tasks]]
"""
    assert end(code).value == [13, False, [0, 1, 2]]


def test_async_for_over_as_completed_says_how_to_loop() -> None:
    code = "import asyncio\nasync for r in asyncio.as_completed([tools.t(a=1)]):\n    pass"
    assert failed(code).message == (
        "asyncio.as_completed gives a plain iterator in scripts (Python 3.11's): write "
        "`for next_done in asyncio.as_completed(aws): result = await next_done`"
    )


def test_what_is_a_coroutine_and_what_a_future() -> None:
    code = """
import asyncio
async def f():
    return 1
c = f()
t = tools.t(a=1)
out = [asyncio.iscoroutine(c), asyncio.iscoroutine(t), asyncio.isfuture(t),
       asyncio.isfuture(c), asyncio.iscoroutinefunction(f), await c, (await t)["echo"]]
return out
"""
    assert end(code).value == [True, False, True, False, True, 1, {"a": 1}]


def test_cancelling_tasks_that_await_each_other_ends_both() -> None:
    """Each cancels what it awaits: a ring (or a task awaiting itself) must not recurse."""
    code = """
import asyncio
async def a():
    await tb
async def b():
    await ta
ta = asyncio.create_task(a())
tb = asyncio.create_task(b())
async def me():
    await tc
tc = asyncio.create_task(me())
await asyncio.sleep(0)
out = [ta.cancel(), tc.cancel()]
ends = await asyncio.gather(ta, tb, tc, return_exceptions=True)
return [out, [type(e).__name__ for e in ends]]
"""
    assert end(code).value == [[True, True], ["CancelledError"] * 3]


def test_a_queue_of_no_size_says_what_it_takes() -> None:
    assert failed("import asyncio\nasyncio.Queue(maxsize='10')").message == (
        "maxsize must be an int, not str"
    )
    assert failed("import asyncio\nq = asyncio.Queue()\nq.task_done()").message == (
        "task_done() called too many times"
    )


def test_a_sleep_never_awaited_warns_as_a_coroutine_does() -> None:
    """`asyncio.sleep(1)` written for `await asyncio.sleep(1)` said nothing, where CPython
    warns "coroutine 'sleep' was never awaited" (as the sandbox says of the script's own
    coroutines); asyncio.wait_for and asyncio.wait never awaited were named
    'Run._asyncio.<locals>.wait_for'. One made a task, gathered or awaited warns of nothing."""
    code = (
        "import asyncio\n"
        "asyncio.sleep(1)\n"
        "asyncio.wait_for(asyncio.sleep(1), 1)\n"
        "asyncio.wait([asyncio.sleep(1)])\n"
        "asyncio.create_task(asyncio.sleep(1))\n"
        "await asyncio.gather(asyncio.sleep(0))\n"
        "s = asyncio.sleep(0)\n"
        "await s\n"
        "return 1"
    )
    ran = run(code)
    assert ran.outcome == "finished", ran.error
    assert ran.printed == (
        "line 2: RuntimeWarning: coroutine 'sleep' was never awaited\n"
        "line 3: RuntimeWarning: coroutine 'wait_for' was never awaited\n"
        "line 3: RuntimeWarning: coroutine 'sleep' was never awaited\n"
        "line 4: RuntimeWarning: coroutine 'wait' was never awaited\n"
        "line 4: RuntimeWarning: coroutine 'sleep' was never awaited\n"
    )


# ---- async generators ----

PAGES = """
async def pages():
    try:
        for n in range(1, 4):
            yield await tools.t(page=n)
    finally:
        print("closing")
        await tools.t(close=True)
for_first = None
async for page in pages():
    for_first = page["echo"]["page"]
    break
print("after the loop")
return for_first
"""


def test_an_async_generator_left_by_break_is_closed_and_its_finally_may_await() -> None:
    """``break`` in ``async for`` drops the generator: it is closed where it is dropped, and
    when its ``finally`` awaits a call, the rest of its closing goes on in a task of its own,
    as asyncio's loop runs it: the call is made and answered (closed in place only, the await
    was "async generator ignored GeneratorExit": a warning line, the call made but never
    awaited). A failure there is a line, as a task's."""
    assert calls_per_step(PAGES) == [[{"page": 1}], [{"close": True}]]
    ran = end(PAGES)
    assert ran.outcome == "finished" and ran.value == 1
    assert ran.printed == "closing\nafter the loop\n"
    failing = PAGES.replace("tools.t(close=True)", "tools.t(close=True, fail=True)")
    ran = end(failing)
    assert ran.outcome == "finished" and ran.value == 1
    assert ran.printed == (
        "closing\nafter the loop\nline 12: RuntimeWarning: pages.aclose() failed and nothing "
        "awaited it: ToolError: t refused {'close': True, 'fail': True}\n"
    )


def test_an_async_generator_left_unfinished_at_the_end_is_closed_naming_its_line() -> None:
    """One the script still holds when it returns is closed as it ends, its ``finally``
    run (a call there made and answered); a failure there names the line its closing
    waited at (the await in its ``finally``), as no line of the script is running then."""
    code = (
        "async def g():\n"
        "    try:\n"
        "        yield 1\n"
        "        yield 2\n"
        "    finally:\n"
        "        await tools.t(close=True)\n"
        "        raise KeyError('cleanup')\n"
        "it = g()\n"
        "await anext(it)\n"
        "return 'end'"
    )
    assert calls_per_step(code) == [[{"close": True}]]
    ran = end(code)
    assert ran.outcome == "finished" and ran.value == "end"
    assert ran.printed == (
        "line 6: RuntimeWarning: g.aclose() failed and nothing awaited it: KeyError: 'cleanup'\n"
    )


def test_async_generators_left_unfinished_when_the_script_fails_are_closed() -> None:
    """Those the script still holds when it fails are closed too, in the order they began,
    as asyncio.run closes what is left (shutdown_asyncgens): their ``finally`` runs, a call
    there made and answered, and the run fails with the script's error. They were closed
    only when it returned (its error's traceback kept them), the calls never made."""
    code = (
        "async def g(n):\n"
        "    try:\n"
        "        yield n\n"
        "    finally:\n"
        "        await tools.t(release=n)\n"
        "        print('released', n)\n"
        "second = g(2)\n"
        "first = g(1)\n"
        "await anext(first)\n"
        "await anext(second)\n"
        "raise ValueError('main fails')"
    )
    assert calls_per_step(code) == [[{"release": 1}, {"release": 2}]]
    ran = end(code)
    assert ran.outcome == "failed" and ran.error is not None
    assert (ran.error.name, ran.error.message) == ("ValueError", "main fails")
    assert ran.printed == "released 1\nreleased 2\n"


def test_an_async_generator_the_collector_drops_is_closed_naming_its_line() -> None:
    """One dropped in a reference cycle is closed where the garbage collector runs, in
    place: an await in its ``finally`` is CPython's "ignored GeneratorExit", a warning that
    names the line the generator waits at (where the collector ran differs between a live
    run and a replay; the line was left out)."""
    code = (
        "import asyncio\n"
        "class Box:\n"
        "    pass\n"
        "async def g():\n"
        "    try:\n"
        "        yield 1\n"
        "    finally:\n"
        "        print('finally start')\n"
        "        await asyncio.sleep(0)\n"
        "        print('finally end')\n"
        "b = Box()\n"
        "b.it = g()\n"
        "b.me = b\n"
        "await anext(b.it)\n"
        "b = None\n"
        "return 1"
    )
    ran = end(code)
    assert ran.outcome == "finished" and ran.value == 1
    assert ran.printed == (
        "finally start\nline 9: Warning: an exception in g was ignored: RuntimeError: "
        "async generator ignored GeneratorExit\n"
    )


def test_an_async_generator_dropped_as_the_ending_is_made_is_not_closed() -> None:
    """One the script drops while its ending is made (a returned dict subclass's items(),
    after the run has let its tasks go) is not closed: no task runs again, and a closing
    begun there would run its ``finally`` (printing, a call made) with none to finish it."""
    code = (
        "async def g():\n"
        "    try:\n"
        "        yield 1\n"
        "    finally:\n"
        "        print('finally')\n"
        "        await tools.t(release=1)\n"
        "class D(dict):\n"
        "    def items(self):\n"
        "        it = g()\n"
        "        try:\n"
        "            it.asend(None).send(None)\n"
        "        except StopIteration:\n"
        "            pass\n"
        "        return super().items()\n"
        "return D(a=1)"
    )
    assert calls_per_step(code) == []
    ran = end(code)
    assert ran.outcome == "finished" and ran.value == {"a": 1}
    assert ran.printed == ""
