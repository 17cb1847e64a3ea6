"""sandbox/rejections.py: QuickJS's promise rejection tracker, reached through ctypes."""

from __future__ import annotations

import gc

import _quickjs

from sandbox import rejections

TRACK = """
globalThis.seen = [];
(function (reason, handled) { seen.push([String(reason), handled, this instanceof Promise]); })
"""


def _drain(ctx: _quickjs.Context) -> None:
    while ctx.execute_pending_job():
        pass


def test_the_function_hears_each_rejection_and_each_late_handler() -> None:
    ctx = _quickjs.Context()
    watch = rejections.watch(ctx, ctx.eval(TRACK))
    assert watch is not None and not watch.rejected
    ctx.eval("const p = Promise.reject(new Error('a'));\nPromise.reject(1).catch(() => 0);")
    _drain(ctx)
    ctx.eval("p.then(null, () => 0);")
    _drain(ctx)
    assert watch.rejected
    assert ctx.eval("JSON.stringify(seen)") == (
        '[["Error: a",0,true],["1",0,true],["1",1,true],["Error: a",1,true]]'
    )


def test_a_function_that_throws_costs_the_run_nothing() -> None:
    """The tracker's own failure (the heap full, say) is dropped: the script goes on."""
    ctx = _quickjs.Context()
    watch = rejections.watch(ctx, ctx.eval("(function () { throw new Error('tracker'); })"))
    assert watch is not None
    assert ctx.eval("Promise.reject(1); 'went on'") == "went on"
    ctx.eval(
        "var out; (async () => { try { await Promise.reject(2); } catch (e) { out = e; } })();"
    )
    _drain(ctx)
    assert ctx.eval("out") == 2 and watch.rejected


def test_no_watch_for_what_is_not_a_function_of_that_context() -> None:
    """The layout check: an object of another context, or no object, gives no tracker."""
    ctx, other = _quickjs.Context(), _quickjs.Context()
    assert rejections.watch(ctx, other.eval("(function () {})")) is None
    assert rejections.watch(ctx, 5) is None
    assert rejections.watch(ctx, ctx.eval("(function () {})")) is not None


def test_a_watch_let_go_unsets_the_tracker_while_its_context_lives_on() -> None:
    """The hook the tracker reads is the watch's: once the watch goes, a rejection in the
    context (kept alive by another reference) calls nothing, rather than freed memory."""
    ctx = _quickjs.Context()
    watch = rejections.watch(ctx, ctx.eval(TRACK))
    assert watch is not None
    del watch
    gc.collect()
    for _ in range(1000):
        ctx.eval("Promise.reject(new Error('after'));")
    _drain(ctx)
    assert ctx.eval("seen.length") == 0
