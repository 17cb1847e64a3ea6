"""Runs one JavaScript script in a QuickJS context: the JavaScript binding of the replay core
(sandbox/replay.py), which holds the replay rules, limits, printed text, files and endings.

This module binds what is JavaScript's own: the prelude (sandbox/prelude.js) that gives the
script ``tools``, ``files``, ``console`` and a fixed clock; the job queue QuickJS runs; the
script's value and errors, with its own line numbers. It also picks the binding for a
script's language (:func:`new_run`) and runs a script in this process
(:func:`run_in_process`, :class:`LiveInProcess`).
"""

from __future__ import annotations

import contextlib
import ctypes
import re
from collections.abc import Callable, Iterator
from importlib import resources
from types import FrameType
from typing import Any

import _quickjs
import orjson

from sandbox import rejections, typescript
from sandbox.files import Fetch
from sandbox.names import hyphened_reference, unwritable_tool
from sandbox.protocol import (
    ERROR_MESSAGE_BOUND,
    ERROR_NAME_BOUND,
    LIVE_VERSION,
    MAX_DEPTH,
    PRINTED_HEAD,
    PRINTED_TAIL,
    VALUE_BOUND,
    ErrorLine,
    LimitMet,
    Ran,
    Record,
    Script,
    ScriptError,
    well_formed,
)
from sandbox.replay import (
    CPU_STOP,
    Channel,
    Replay,
    ResumeError,
    _Collect,
    _cut,
    _Ended,
    _finished,
    _NotData,
    assigned_ending,
    bare_ending,
    cpu_ms,
    never_called,
    source_lines,
    unawaited,
    warning_line,
)

__all__ = [
    "Channel",
    "LiveInProcess",
    "Prepared",
    "ResumeError",
    "Run",
    "cpu_ms",
    "new_run",
    "run_in_process",
    "warming_up",
]

PRELUDE = resources.files("sandbox").joinpath("prelude.js").read_text(encoding="utf-8")
WEB = resources.files("sandbox").joinpath("web.js").read_text(encoding="utf-8")
# Compiled with the boot, before any script (sandbox/lazy.js), by name.
LAZY = resources.files("sandbox").joinpath("lazy.js").read_text(encoding="utf-8")
LAZY_SOURCES = {
    name: resources.files("sandbox").joinpath(f"{name}.js").read_text(encoding="utf-8")
    for name in ("intl", "url")
}
# The line a prepared context's boot starts at (and, compiled there, lazy.js's files): past any
# script's lines, so that no frame in them is read as one of the script's.
PRELUDE_LINE = 300_000
_HOST_FUNCTIONS = (
    "call",
    "print",
    "closest",
    "done",
    "fail",
    "file",
    "untaken",
    "changed",
    "limit",
)


def _quickjs_runtime() -> Callable[[Any], int | None]:
    """What finds the QuickJS runtime a binding's ``Context`` object holds (after the
    object's head: the runtime, then the context, checked against ``JS_GetRuntime`` of the
    context before use); None for a binding laid out otherwise. The binding exposes neither
    an interrupt handler (but its time limit's) nor the GC threshold: both are set through
    the QuickJS the binding exports. Made at import, before lockdown."""
    try:
        get_runtime = ctypes.CDLL(_quickjs.__file__).JS_GetRuntime
    except (OSError, AttributeError):
        return lambda ctx: None
    get_runtime.restype = ctypes.c_void_p
    get_runtime.argtypes = [ctypes.c_void_p]
    head = object.__basicsize__
    pointer = ctypes.sizeof(ctypes.c_void_p)

    def runtime_of(ctx: Any) -> int | None:
        if type(ctx).__basicsize__ < head + 2 * pointer:
            return None
        runtime = ctypes.c_void_p.from_address(id(ctx) + head).value
        context = ctypes.c_void_p.from_address(id(ctx) + head + pointer).value
        if runtime and context and get_runtime(context) == runtime:
            return int(runtime)
        return None

    return runtime_of


_runtime_of = _quickjs_runtime()


def _interrupt_poll() -> Callable[[Any], None]:
    """What makes a context call :data:`CPU_STOP`'s ``poll`` every 10,000 or so of QuickJS's
    operations (its interrupt handler): a script's loop that never leaves JavaScript runs
    Python code there, where the CPU timer's signal handler runs and the run can end
    (replay.CpuStop). About a microsecond in every 0.2 ms of JavaScript.

    The binding's only interrupt handler is its time limit's, which refuses every call into
    Python (see :func:`_quickjs_runtime`). A binding laid out otherwise gets no poll: a CPU
    timer that goes off in JavaScript then finds no point to end the run at, and the process
    is ended (lockdown.stop_softly). Made at import, before lockdown: a callback needs memory
    it may execute."""
    try:
        set_handler = ctypes.CDLL(_quickjs.__file__).JS_SetInterruptHandler
    except (OSError, AttributeError):
        return lambda ctx: None
    set_handler.restype = None
    set_handler.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    handler = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    def poll(runtime: int | None, opaque: int | None) -> int:
        CPU_STOP.poll()
        return 0

    callback = handler(poll)

    def watch(ctx: Any) -> None:
        runtime = _runtime_of(ctx)
        if runtime is not None:
            set_handler(runtime, ctypes.cast(callback, ctypes.c_void_p), None)

    watch.callback = callback  # type: ignore[attr-defined]  # alive as long as the poll
    return watch


_watch_cpu = _interrupt_poll()


def _gc_hold() -> Callable[[Any], None]:
    """What keeps a context from collecting its garbage from then on (its GC threshold at
    the most), for a run that is ending: its next allocation after a heap grown without one
    (an array of ten million numbers, pushed) collected the whole heap first, 50 ms. See
    :func:`_quickjs_runtime`; a binding laid out otherwise collects as before."""
    try:
        set_threshold = ctypes.CDLL(_quickjs.__file__).JS_SetGCThreshold
    except (OSError, AttributeError):
        return lambda ctx: None
    set_threshold.restype = None
    set_threshold.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    def hold(ctx: Any) -> None:
        runtime = _runtime_of(ctx)
        if runtime is not None:
            set_threshold(runtime, ctypes.c_size_t(-1).value)

    return hold


_hold_gc = _gc_hold()


# Evaluated on a context where nothing has run: a function of the line lazy.js's files are to
# start at (past the script's last; null: none, see warming_up), which takes the host
# functions off the global object, makes the prelude's world and gives
# `start(config_json, code)`, which sets what the script's record sets and runs the script.
# What lazy.js installs (Intl, URL) is compiled here too, before any script, in every mode:
# compiled at a run's first use, its files' own set-up ran after the script's code and took
# the built-ins the script had replaced, so an exec'd process (whose context is its own) and
# a pool's child (whose context the fork server prepared) gave a script different answers.
_BOOT = (
    "(function (lazyLine) {\n"
    "  const host = {" + ", ".join(f"{name}: __cm_{name}" for name in _HOST_FUNCTIONS) + "};\n"
    "  for (const k of Object.keys(host)) delete globalThis['__cm_' + k];\n"
    "  const lazySource = __cm_source;\n"
    "  delete globalThis.__cm_source;\n"
    f"  const web = {WEB.strip()};\n"
    "  const intlBrand = lazyLine === null ? undefined\n"
    f"    : ({LAZY.strip()})(lazySource, lazyLine, web);\n"
    # The prelude's world is made here, before any script exists (the prelude replaces
    # the global JSON.parse: the config is read with the engine's own).
    "  const parseConfig = JSON.parse;\n"
    f"  const world = ({PRELUDE})(host, web, intlBrand);\n"
    # `start(null, name)` gives the world's function `name`: `rejection`, which the
    # rejection tracker calls (sandbox/rejections.py), or `here`, the CPU stop's frames.
    "  return (config, code, mayStrip) => {\n"
    "    if (config === null) return world[code];\n"
    "    return world.begin(parseConfig(config), code, mayStrip);\n"
    "  };\n"
    "})"
)


# Whether a context of a run's own is booted with Intl and URL: not while a sandbox process
# warms up (see warming_up).
_WITH_LAZY = [True]


@contextlib.contextmanager
def warming_up() -> Iterator[None]:
    """Within it, a run on a context of its own boots that context without Intl and URL
    (lazy.js's files): for the warm-up of a sandbox process (sandbox/__main__.py), whose
    scripts, ours, use neither and are run to load what a run's Python side needs before
    lockdown. An exec'd process compiled the files in each of its three warm-up runs: 13 ms
    of a trivial step's 165."""
    _WITH_LAZY[0] = False
    try:
        yield
    finally:
        _WITH_LAZY[0] = True


def _lazy_source(name: str) -> str:
    """The text of a file lazy.js compiles (``intl``, ``url``), which it asks for as the boot
    runs (not a literal in the boot's text, which would have to be escaped)."""
    return LAZY_SOURCES[name]


# A live run's heap is counted again once it has used this many times the last count's CPU.
HEAP_WALK_SHARE = 20

# The JS engine's own stack bound: deep recursion is a catchable RangeError well before the
# process's C stack (8 MiB or more after lockdown) could overflow.
JS_STACK_BYTES = 1024 * 1024
# The TypeScript stripper's (Sucrase's parser recurses some 20 frames a level of nesting: at
# 1 MiB a literal nested 45 deep, or 50 unclosed parentheses, overflowed it), within the
# main thread's 8 MiB of C stack (sandbox.lockdown.STACK_BYTES).
STRIP_STACK_BYTES = 4 * JS_STACK_BYTES

# A frame's line in a stack. A stack is the script's to write (`e.stack = ...`), so a line
# number is read only up to 9 digits: a longer one names no line of any script.
_FRAME = re.compile(r"<input>:(\d{1,9})(?!\d)")
# A line that imports or exports (not `import(...)`): a script is a function's body.
_MODULE_LINE = re.compile(r"\s*(?:import\s*[\w${*\"']|export\b)")
# A decorator (`@name` at a line's start, or after a space, `{` or `;`, or a parameter's:
# after `(` or `,`, as `constructor(@inject db: Db)`).
_DECORATOR = re.compile(r"(?:^|[\s{;(,])@[A-Za-z_$]")
_NO_DECORATORS = "; decorators are not supported in a script: call the function instead"
_NO_MODULES = (
    "; a script is the body of an async function and has no modules to import or export: "
    "reach the host through `tools` (await tools.name({...}))"
)


def _syntax_note(line: str) -> str:
    """What a syntax error on this line of a script adds to its message: a line that
    imports or exports, or one with a decorator, is JavaScript a script cannot have."""
    if _MODULE_LINE.match(line):
        return _NO_MODULES
    if _DECORATOR.search(line):
        return _NO_DECORATORS
    return ""


# The globals of Node.js and of browsers a model reaches for, none of which a script has, and
# Python's names it writes in JavaScript: an uncaught "X is not defined" for one of them says
# what the script has instead.
_NO_NETWORK = (
    "; a script has no network: reach the host through `tools` (await tools.name({...})); "
    'find them with await tools.tool_search({ query: "..." })'
)
_NO_TIMERS = (
    "; a script has no timers: it cannot wait for time to pass (its clock is fixed), so a "
    "retry needs no wait: call the tool again at once, a few times at most"
)
_NOT_NODE = (
    "; a script runs in a bare JavaScript engine, neither Node.js nor a browser: it has the "
    "language's built-ins, `tools`, `files` and `console.log` (and structuredClone, "
    "crypto.randomUUID, TextEncoder, TextDecoder, URL, URLSearchParams, atob, btoa, and Intl for "
    "en-US in UTC)"
)
_NO_GC = "; garbage collection is not observable in a script: its runs must repeat exactly"
_HOST_GLOBALS = {
    **dict.fromkeys(("fetch", "XMLHttpRequest", "WebSocket", "EventSource"), _NO_NETWORK),
    **dict.fromkeys(("WeakRef", "FinalizationRegistry"), _NO_GC),
    **dict.fromkeys(("require", "module", "exports", "__dirname", "__filename"), _NO_MODULES),
    **dict.fromkeys(
        (
            "setTimeout",
            "setInterval",
            "setImmediate",
            "clearTimeout",
            "clearInterval",
            "clearImmediate",
            "requestAnimationFrame",
            "cancelAnimationFrame",
            "requestIdleCallback",
        ),
        _NO_TIMERS,
    ),
    **dict.fromkeys(
        (
            "process",
            "Buffer",
            "global",
            "window",
            "document",
            "alert",
            "prompt",
            "confirm",
            "navigator",
            "localStorage",
            "sessionStorage",
            "indexedDB",
            "AbortController",
            "AbortSignal",
            "Blob",
            "File",
            "FormData",
            "Headers",
            "Request",
            "Response",
            "DOMException",
            "Event",
            "EventTarget",
            "CustomEvent",
            "MessageChannel",
            "BroadcastChannel",
            "Worker",
            "ReadableStream",
            "WritableStream",
            "TransformStream",
        ),
        _NOT_NODE,
    ),
    # Python's, which a model writes in JavaScript: what JavaScript has instead.
    "print": "; print is Python's: a JavaScript script prints with console.log(...)",
    **dict.fromkeys(
        ("True", "False", "None"),
        "; JavaScript writes true, false and null (Python's True, False, None)",
    ),
}
_NOT_DEFINED = re.compile(r"([A-Za-z_$][\w$]*) is not defined")
# An async callback given to forEach, which does not wait for it (typescript-eslint's
# no-misused-promises): the script goes on without its calls' results, and errors are lost.
_ASYNC_FOREACH = re.compile(r"\.forEach\(\s*async\b")
_ASYNC_FOREACH_WARNING = (
    "forEach does not wait for an async callback: the script goes on before its calls "
    "finish, without their results, and their errors are lost; write "
    "`for (const x of items) { await ... }`, or "
    "`await Promise.all(items.map(async (x) => ...))`"
)


def changed_after_return(count: int, shown: str) -> str:
    """What the line says when code that waited on ``count`` calls (the first ``shown``),
    unanswered when the script returned, changed the returned value once they answered."""
    if count == 1:
        waiting = f"code waiting on {shown} changed it once the call answered"
        fix = "await each call before returning"
    else:
        waiting = (
            f"code waiting on {count} calls (the first: {shown}) changed it once they answered"
        )
        fix = "await every call before returning, as `await Promise.all(items.map(...))`"
    return (
        f"the returned value changed after the script returned: {waiting}, but the value "
        f"returned is as it was at the return; {fix}"
    )


# A last line that is a name or a member of one and nothing else (`result`, `data.items[0];`):
# in a notebook the answer, in a script a value that goes nowhere (see _warn_bare_ending).
_BARE_ENDING = re.compile(
    r"\s*([A-Za-z_$][\w$]*(?:\??\.[A-Za-z_$][\w$]*|\[[^\[\]\n]{0,80}\])*)\s*;?\s*"
)
# A last line of one of these is no value left over.
_NOT_BARE = frozenset(
    ("break", "continue", "debugger", "return", "this", "undefined", "null", "true", "false")
)
# A null the script throws or rejects with itself, in its text.
_THROWS_NULL = re.compile(r"\bthrow\s+null\b|\breject\(\s*null\s*\)")
# A last line that calls a function (`main();`, `await main()`, `main().catch(console.error)`):
# a program's habit, whose answer in a script goes nowhere when that function is the script's
# own and gives a value (see _warn_bare_ending).
_CALL_ENDING = re.compile(r"\s*((?:await\s+)?([A-Za-z_$][\w$]*)\s*\([^\n]*\))\s*;?\s*")
_RETURNS_VALUE = re.compile(r"\breturn\s*[^\s;}]")
# A line that declares one name with a value, at the left margin (`const summary = {`).
_DECLARED = re.compile(r"(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::[^=]{1,80})?=(?!=)")
_STATEMENT_AFTER = re.compile(r";\s*[^\s/]")
_FUNCTION_VALUE = re.compile(r"\s*(?:async\b\s*)?(?:function\b|\(|[A-Za-z_$][\w$]*\s*=>)")

# A line at the left margin that begins a function's definition (see _never_called):
# `async function main(args) {`, `const main = async (input) => {`, or a function written
# alone, `async (input) => {` (TypeScript's `async <T,>() => {`); group 1, 2 or 3 is its name.
_DEFINES_FUNCTION = re.compile(
    r"(?:async\s+)?function\b\s*\*?\s*([A-Za-z_$][\w$]*)?"
    r"|(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::[^=]{1,80})?=\s*(?:async\b\s*)?"
    r"(?:function\b|<[^=]*>\s*\(|\([^()]*\)\s*(?::[^=]*)?=>|[A-Za-z_$][\w$]*\s*=>)"
    r"|(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::[^=]{1,80})?=\s*async\s*\("
    r"|async\s*(?:<|\(|[A-Za-z_$][\w$]*\s*=>)|\([^()]*\)\s*(?::[^=]*)?=>"
)
# A line at the left margin that runs nothing: a value made without a call (`const LIMIT =
# 10;`), a TypeScript type.
_DEFINES_DATA = re.compile(r"(?:const|let|var)\s+[^(]*$|(?:type|interface)\s+[A-Za-z_$]")
_PARAMETERS = re.compile(r"\(\s*[^\s)]")
_ASYNC = re.compile(r"\basync\b")
# A tool written as an attribute that starts with a digit (`tools.2fa_verify`).
_DIGIT_TOOL = re.compile(r"\btools\s*\.\s*(\d[\w$]*)")

# `await` in a function that is not async, which QuickJS reports as "expecting ';'" or
# "Unexpected identifier": told by the script parsing once that line's awaits are blanked.
_AWAIT = re.compile(r"\bawait\b")
_AWAIT_OUTSIDE_ASYNC = (
    "; `await` works only in an async function: make the function that holds it async "
    "(`async (x) => ...`, `async function f() {...}`) and await what it returns (for many, "
    "`await Promise.all(items.map(async (x) => ...))`), or loop with `for ... of`"
)


# QuickJS's bare words for what Node.js says in full, with what to write instead: an object
# that gives no primitive value (`"total: " + counts` of an Object.create(null), which has no
# toString); reduce of an empty array given no first value (a filter that kept nothing); a
# loop over what is no array (a tool's result that holds one: `for (const x of result)`), or
# over nothing (`for (const x of result.rows)`, a field it does not have).
_SAID_IN_FULL = {
    # Said of any value with no iterator (a number, a function, a promise), not only of an
    # object: `for (const f of files.list)` was told it was given "a plain object".
    ("TypeError", "value is not iterable"): (
        "value is not iterable: for...of, spread (`...x`) and `const [a, b] = x` take an array, "
        "a string, a Map or a Set, not a plain object, a number or a function; for an object, "
        "loop over Object.entries(x) or Object.values(x), or over the array it holds "
        "(`x.items`); for a function, over what it gives (`f()`)"
    ),
    **{
        ("TypeError", f"cannot read property 'Symbol.iterator' of {nothing}"): (
            f"{nothing} is not iterable: for...of, spread (`...x`) or `const [a, b] = x` of a "
            f"value that is {nothing} (a field the data does not have?); print the value to "
            "see what it holds"
        )
        for nothing in ("undefined", "null")
    },
    ("TypeError", "toPrimitive"): (
        "cannot convert object to primitive value: it has no toString or valueOf that gives "
        "one (an object made with Object.create(null)?); make text of it with JSON.stringify, "
        "or read its fields"
    ),
    ("TypeError", "empty array"): (
        "reduce of an empty array with no initial value; give reduce one as its second "
        "argument, as `items.reduce((sum, x) => sum + x, 0)`"
    ),
}


# A const the script gives another value, which QuickJS reports as "'total' is read-only"
# at the line of the statement after the assignment (`total = 0;` then `return total;` named
# the return): its declaration, and an assignment to it (`=`, `+=`, `++`; not `o.total =`).
_READ_ONLY = re.compile(r"'([A-Za-z_$][\w$]*)' is read-only")
_CONST_AGAIN = (
    "; it is declared with const, so it cannot be given another value: declare it with let"
)


def _const_declared(name: str) -> re.Pattern[str]:
    """`const name` (or `name` in a const's destructuring, up to its `=`)."""
    quoted = re.escape(name)
    return re.compile(rf"\bconst\s*+(?:[\[{{][^=;]{{0,300}}?(?<![\w$.]))?{quoted}(?![\w$])")


def _assigned(name: str) -> re.Pattern[str]:
    """An assignment to the variable ``name``: `name = `, `name += `, `name++`, `--name`."""
    quoted = re.escape(name)
    return re.compile(
        rf"(?<![\w$.]){quoted}\s*+(?:(?:\*\*|<<|>>>?|&&|\|\||\?\?|[-+*/%&|^])?=(?![=>])|\+\+|--)"
        rf"|(?:\+\+|--)\s*+{quoted}(?![\w$])"
    )


# What QuickJS reports with no line: a regex literal it cannot compile (each is tried, at
# most _LITERAL_TRIES of them: a regex-like stretch of a line is a literal, or a division,
# whose "regex" compiles) and a private name no class declares.
_REGEX_LITERAL = re.compile(r"/(?![*/])(?:[^/\\\[\n]|\\.|\[(?:[^\]\\\n]|\\.)*+\])++/[A-Za-z]*+")
_LITERAL_TRIES = 500
# A `throw` of a string, a template or a number, for a thrown value that is no Error (which
# has no stack): `throw "no such user"`, `throw \`failed: ${why}\``.
_THROWN_LITERAL = re.compile(
    r"""\bthrow\s++("(?:[^"\\\n]|\\.)*+"|'(?:[^'\\\n]|\\.)*+'|`(?:[^`\\]|\\.)*+`|-?[\d.][\w.]*+)"""
)
_TEMPLATE_HOLE = re.compile(r"\$\{[^{}`]*+\}")
_REJECTS = re.compile(r"\breject\b")
_UNDECLARED_PRIVATE = re.compile(r"undefined private field '(#[\w$]+)'")


# QuickJS's "not a function" names no callee, and its column is the last place the failing
# call's code was compiled from: the callee's name (`o.fetch(1)` at `fetch`) when its arguments
# compile to no place of their own, else one in them (`o.a(g(1))` at `g`, `x.map(y => y)` at
# `y`). So the callee is named from the line's text only where one call of it can hold that
# column, and only a name or a chain of them (`tools.crm.find`); a line that may go on a call
# begun above it, or holds a template or regex literal, names none.
# QuickJS says "not a function" too when it calls what a script made in place of a language
# protocol's function (an iterator's `next`, `Symbol.toPrimitive`, `Symbol.hasInstance`, a
# Proxy's trap), at a place of whatever code came before (a loop's `next` at the end of its
# body: `for (const x of items) total.add(x)` at `add`): in a script that makes one, the
# failing call is not told.
_PROTOCOL_OF_ITS_OWN = re.compile(
    r"\bSymbol\s*(?:\.\s*(?:iterator|asyncIterator|toPrimitive|hasInstance)\b|\[)|\bProxy\b"
)
_FIRST_FRAME = re.compile(r"<input>:(\d{1,9}):(\d{1,9})\)?\s*$")
# What prelude.js's `compile` puts before the body on its first line (its BEFORE_BODY), whose
# columns QuickJS counts there.
_FIRST_LINE_COLUMNS = len("throw 0; async function __cm_main() {") - 1
# A longer line (a minified script's) is not read for it: a failure costs little to report.
_CALLEE_LINE_BOUND = 2000
# A line after one ending so begins a statement (not one inside a call's arguments, as after
# `o.a({` or `o.a(1,`): a block's `{` follows `)`, `=>`, `else`, `try`, `finally` or `do`.
_BEGINS_STATEMENT = re.compile(r"(?:[;}]|(?:\)|=>|\b(?:else|try|finally|do))\s*\{)$")
# Where a function written in a line begins (its code is compiled apart).
_FUNCTION_BEGINS = re.compile(r"=>|(?<![\w$])function(?![\w$])")
# Words whose parenthesis opens no call (`if (`, `function f(`); `new X(` calls no function.
_NO_CALL_WORDS = frozenset(
    (
        "if", "for", "while", "switch", "catch", "return", "typeof", "await", "function", "void",
        "delete", "throw", "case", "in", "of", "yield", "else", "do", "instanceof", "async",
    )
)  # fmt: skip


def _name_start(text: str, end: int) -> int:
    """Where the name that ends at ``end`` of ``text`` begins (``end`` if none does)."""
    start = end
    while start and (text[start - 1].isalnum() or text[start - 1] in "_$"):
        start -= 1
    return end if start < end and text[start].isdigit() else start


def _blanks_from(text: str, end: int) -> int:
    """Where the blanks before ``end`` of ``text`` begin."""
    return len(text[:end].rstrip())


def _divides(text: str, at: int) -> bool:
    """Whether the slash at ``at`` of ``text`` divides (after a name, a number, `)` or `]`),
    else it opens a regex literal."""
    end = _blanks_from(text, at)
    return end > 0 and (text[end - 1].isalnum() or text[end - 1] in "_$)]")


def _call_opened(text: str, at: int) -> tuple[int, str | None] | None:
    """What the parenthesis at ``at`` of ``text`` opens: a call, as where its column can be
    from (its callee's last name; the line's start for a callee of another kind, `f()(`,
    `o[k](`) and its callee if a name or a chain of them, else None; None for no call."""
    end = _blanks_from(text, at)
    if text.endswith("?.", 0, end):
        end = _blanks_from(text, end - 2)
    anchor = chain = _name_start(text, end)
    if anchor == end:
        return (0, None) if text[end - 1 : end] in (")", "]") else None
    while True:  # back over each `object.` before the name
        dot = _blanks_from(text, chain)
        if text.endswith("?.", 0, dot):
            dot -= 2
        elif text.endswith(".", 0, dot) and not text.endswith("...", 0, dot):
            dot -= 1
        else:
            break
        name_end = _blanks_from(text, dot)
        chain = _name_start(text, name_end)
        if chain == name_end:
            return anchor, None  # a member of what is no name: `f().g(`, `a[0].g(`
    word_end = _blanks_from(text, chain)
    word = text[_name_start(text, word_end) : word_end]
    if word == "function" or (chain == anchor and text[anchor:end] in _NO_CALL_WORDS):
        return None
    return anchor, None if word == "new" else "".join(text[chain:end].split())


def _callee(lines: list[str], number: int, column: int) -> str | None:
    """The callee of the call on line ``number`` (from 1) of ``lines`` that QuickJS said is
    "not a function" at ``column`` (its: UTF-8 bytes, from 1), when the line says it for sure
    (see _FIRST_FRAME); else None."""
    text = lines[number - 1]
    above = (x.partition("//")[0].strip() for x in reversed(lines[: number - 1]))
    if len(text) > _CALLEE_LINE_BOUND or not _BEGINS_STATEMENT.search(
        next(filter(None, above), ";")
    ):
        return None  # the line may go on a call begun above it
    at = len(text.encode()[: max(column - 1, 0)].decode("utf-8", "ignore"))
    calls: list[tuple[int, int, int, str | None]] = []  # where its column can be from, its ( )
    bodies: list[tuple[int, int]] = []  # where each function written in the line is
    # Each bracket open: itself, where, the call it opens; and, by the same index, where a
    # function written in it begins (-1: none yet).
    opened: list[tuple[str, int, tuple[int, str | None] | None]] = []
    function_at: list[int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in "'\"":
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif c == "`" or text.startswith("/*", i):
            return None
        elif text.startswith("//", i):
            break
        elif c == "/" and not _divides(text, i):
            return None  # a regex literal
        elif c in "([{":
            opened.append((c, i, _call_opened(text, i) if c == "(" else None))
            function_at.append(-1)
        elif c in ")]}":
            if not opened or opened[-1][0] != "([{"[")]}".index(c)]:
                return None  # it closes what a line above opened
            _, opens, call = opened.pop()
            if (begins := function_at.pop()) >= 0:
                bodies.append((begins, i))
            if call is not None:
                calls.append((call[0], opens, i, call[1]))
        elif function_at and function_at[-1] < 0 and _FUNCTION_BEGINS.match(text, i):
            function_at[-1] = i
        elif c == "," and function_at and function_at[-1] >= 0:
            bodies.append((function_at[-1], i))  # an arrow's body ends at the next argument
            function_at[-1] = -1
        i += 1
    for (_, opens, call), begins in zip(opened, function_at, strict=True):
        if begins >= 0:
            bodies.append((begins, len(text)))
        if call is not None:
            calls.append((call[0], opens, len(text), call[1]))
    # A call whose arguments hold a function the column is in (`p.then((x) => x.go())` at
    # `go`) is not the one: the function's code is compiled apart, its places its own.
    holding = [
        callee
        for begins, opens, ends, callee in calls
        if begins <= at <= ends and not any(opens < b < at <= e for b, e in bodies)
    ]
    return holding[0] if len(holding) == 1 else None


def _fills(parts: list[str], text: str) -> bool:
    """Whether ``text`` is ``parts`` with anything between each two (a template's text
    between its holes, as written: escapes left as they are), found left to right."""
    if len(parts) == 1:
        return text == parts[0]
    first, *middle, last = parts
    end = len(text) - len(last)
    if not (text.startswith(first) and text.endswith(last) and len(first) <= end):
        return False
    at = len(first)
    for part in middle:
        found = text.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


class Run(Replay):
    """One run of one JavaScript script. Create, then call :meth:`execute` once."""

    STEERING = "Date and Math.random"
    STUCK = Replay.STUCK + " (a promise that is never resolved?)"

    def __init__(
        self,
        script: Script,
        channel: Channel,
        fetch: Fetch | None = None,
        prepared: Prepared | None = None,
    ) -> None:
        super().__init__(script, channel, fetch)
        self.prepared = prepared
        self.ctx: Any = None
        self.javascript = ""  # the script as it was compiled (without TypeScript's types)
        # The last heap count: (the CPU ms when taken, the CPU ms to wait before the next,
        # the count); see heap_bytes.
        self._heap_walk: tuple[float, float, int] | None = None
        self._watch: rejections.Watch | None = None
        self._here: Any = None  # the prelude's `here`, which stop_lines calls
        # The returned value changed after the return, by code that waited on calls not yet
        # answered then: how many, the first as shown, and its stack (see keepReturned in
        # prelude.js).
        self._changed_after_return: tuple[int, str, str] | None = None

    def release(self) -> None:
        super().release()
        # A context of its own goes at once; a prepared one is its maker's. (The watch holds
        # the context: it goes first, and unsets the tracker while the context is there.)
        self._watch = self._here = None
        self.ctx = self.prepared = None

    def heap_bytes(self) -> int:
        """QuickJS's count of the heap, which walks every object (a million objects: about
        140 ms). A live run reports at every call: there the count is taken again only once
        the process has used ``HEAP_WALK_SHARE`` times the last walk's CPU since it, so the
        walks cost a twentieth of the run at most, and in between the last count stands.
        (Taken at every call, it made each call of a script holding 500,000 objects cost
        42 ms more, charged to its ``compute_ms``.)"""
        if self.ctx is None:
            return 0
        if CPU_STOP.ending:
            # A run its CPU timer ends has 8% of compute_ms (40 ms at most) to write its
            # ending before the hard stop ends the process, and what it printed with it: a
            # walk of 3 million objects took 100 ms. The last count stands, or none.
            return 0 if self._heap_walk is None else self._heap_walk[2]
        now = cpu_ms()
        if self._heap_walk is not None and now - self._heap_walk[0] < self._heap_walk[1]:
            return self._heap_walk[2]
        self._heap_walk = _walk_heap(self.ctx, now)
        return self._heap_walk[2]

    # ---- host functions: strings in, strings out, never raise into JS ----

    def _guard(self, fn: Any) -> Any:
        def guarded(*args: Any) -> Any:
            try:
                if None in args:
                    # The prelude hands the host strings only; the binding gives None for one
                    # it could not copy out of the heap (JS_ToCString failed): no memory left.
                    raise MemoryError
                return fn(*args)
            except _Ended:
                return "x"
            except MemoryError:
                ending = Ran(
                    outcome="failed",
                    error=ScriptError(name="LimitError", message=self._memory_message()),
                    limit=LimitMet(name="memory", message=self._memory_message()),
                )
            except Exception as e:  # a bug on our side must still end the run cleanly
                message = f"the sandbox failed: {type(e).__name__}: {e}"
                ending = Ran(
                    outcome="failed", error=ScriptError(name="InternalError", message=message)
                )
            with contextlib.suppress(_Ended):
                self._end(ending)
            return "x"

        return guarded

    def _done(self, payload: str) -> None:
        if self.ended or self.outcome is not None:
            return
        self.outcome = ("value", payload)

    def _fail(self, name: str, message: str, stack: str, null: bool = False) -> None:
        """The script's uncaught error; ``null``: the value thrown was ``null`` itself."""
        if self.ended or self.outcome is not None:
            return
        self.outcome = ("error", (name, message, stack, null is True))

    def _changed(self, count: str, shown: str, stack: str) -> None:
        if self.ended or not count.isdigit():
            return
        self._changed_after_return = (int(count), shown, stack)

    def _limit(self, stack: str) -> None:
        """The call just made met a limit (its answer was ``L``): the run ends on it, at the
        script's lines in ``stack``, taken where the call was made."""
        if self.ended or (self.limit_met is None and self.diverged is None):
            return
        self.end_at_limit(self._lines(stack))

    def _untaken(self, shown: str, message: str, stack: str) -> None:
        """A call that failed and that nothing took (awaited, caught) by the script's end: a
        printed line naming it, at the script's line that made it."""
        if self.ended or not all(isinstance(x, str) for x in (shown, message, stack)):
            return
        self._warn_at(stack, unawaited(shown, message))

    def _warn_at(self, stack: str, message: str) -> None:
        """A printed ``Warning`` line at the script's innermost line in ``stack`` (none: no
        line number)."""
        lines = self._lines(stack)
        self.printed.write(warning_line(lines[0].line if lines else 0, "Warning", message))

    # ---- endings ----

    def _host_functions(self) -> dict[str, Any]:
        return {
            name: self._guard(fn)
            for name, fn in (
                ("call", self._call),
                ("print", self._print),
                ("closest", self._closest),
                ("done", self._done),
                ("fail", self._fail),
                ("file", self._file),
                ("untaken", self._untaken),
                ("changed", self._changed),
                ("limit", self._limit),
            )
        }

    def _execute(self) -> Ran:
        script = self.script
        prepared = self.prepared
        if prepared is not None and prepared.take(self):
            ctx, start = prepared.ctx, prepared.start
            self._watch, self._here = prepared.watch, prepared.here
            # The count its maker took (see Prepared.count_heap) stands for the first one.
            self._heap_walk = prepared.heap_walk
        else:
            ctx = _quickjs.Context()
            _watch_cpu(ctx)
            for name, fn in self._host_functions().items():
                ctx.add_callable("__cm_" + name, fn)
            ctx.add_callable("__cm_source", _lazy_source)
            # The prelude's lines come after the script's last, so a frame in it is never read
            # as a line of the script.
            line = len(self.script_lines) + 2
            start = ctx.eval("\n" * line + _BOOT)(line if _WITH_LAZY[0] else None)
            self._watch = rejections.watch(ctx, start(None, "rejection"))
            self._here = start(None, "here")
        self.ctx = ctx
        ctx.set_memory_limit(self.limits.memory)
        ctx.set_max_stack_size(JS_STACK_BYTES)
        seed = script.clock.seed & 0xFFFFFFFFFFFFFFFF
        config = orjson.dumps(
            {
                "tools": self.tool_names,
                "now_ms": float(script.clock.now_ms),
                "seed_lo": float(seed & 0xFFFFFFFF),
                "seed_hi": float(seed >> 32),
                "value_bound": float(VALUE_BOUND),
                "max_depth": float(MAX_DEPTH),
                "printed_bound": float(PRINTED_HEAD + PRINTED_TAIL),
            }
        ).decode()
        stripper = prepared.stripper if prepared is not None else typescript.Stripper()
        body = well_formed(script.code)
        # The script's text is an argument, never part of a source: the prelude compiles it
        # on its own (see `compile` in prelude.js). It is compiled as JavaScript first and
        # stripped of TypeScript's types only if it does not parse (the prelude then begins
        # nothing), or at once if it has what reads as a call with type arguments.
        stripped = typescript.wanted(body)
        code = self.javascript = self._typescript(stripper, body) if stripped else body
        try:
            settle = start(config, code, not stripped)
            if isinstance(settle, str):  # "unparsed"
                code = self.javascript = self._typescript(stripper, body)
                settle = start(config, code, False)
            self.settle = settle
        except _quickjs.JSException as e:
            if self.ended:
                raise _Ended from None
            return self._from_exception(str(e))
        return self._drive()

    def _drive(self) -> Ran:
        """Run jobs until the queue is empty; settle the recorded calls made meanwhile (version
        2) and go on while there are any; then report how the run stands."""
        ctx = self.ctx
        asked_again = False
        while True:
            while not self.ended:
                try:
                    more = ctx.execute_pending_job()
                except _quickjs.JSException as e:  # a job threw outside any promise
                    if self.ended:
                        break
                    return self._from_exception(str(e))
                if not more:
                    break
            if self.ended:
                raise _Ended
            try:
                if self._settle_recorded():
                    continue
                if self.outcome is not None or self.new_calls or asked_again:
                    break
                # No ending and nothing to wait for: the ending may have been lost to a
                # full heap (see settle in prelude.js); ask for it once more.
                asked_again = True
                self.settle("")
            except _quickjs.JSException as e:  # out of memory while settling
                if self.ended:
                    raise _Ended from None
                return self._from_exception(str(e))
        return self._conclude()

    def _typescript(self, stripper: typescript.Stripper, code: str) -> str:
        """The script without its TypeScript types (see sandbox/typescript.py); a script
        that cannot be stripped fails here."""
        try:
            return stripper.strip(code, memory=self.limits.memory, stack=STRIP_STACK_BYTES)
        except typescript.StripError as e:
            lines = self._lines(f"<input>:{e.line}") if e.line else []
            message = _cut(e.message, 1000)
            text = lines[0].text if lines else ""
            for written in _DIGIT_TOOL.findall(text):
                if "_" + written in self.script.tools:  # `tools.2fa_verify`: its name here
                    message = unwritable_tool("_" + written, written, language="javascript")
                    break
            else:
                # The notes QuickJS's own syntax errors get (see _failed): a parameter's
                # decorator is one Sucrase, not QuickJS, stops at.
                message += _syntax_note(text)
            error = ScriptError(name="SyntaxError", message=message, lines=lines)
            self._end(Ran(outcome="failed", error=error))

    def _conclude(self) -> Ran:
        if not self.new_calls and self._heap_ran_out():
            # The heap ran out in a job, whose promise took the null QuickJS throws then: the
            # script caught it, or left it unhandled and waited on (a StuckError), or went on.
            # The run fails on the memory limit, as one whose ending is that null does.
            return self._finish(self._failed("InternalError", "out of memory", ""))
        return super()._conclude()

    def _heap_ran_out(self) -> bool:
        """Whether a promise was rejected with QuickJS's out-of-memory error, or with a null
        that the script does not write."""
        watch = self._watch
        return watch is not None and (
            watch.rejected_out_of_memory
            or (watch.rejected_with_null and not _THROWS_NULL.search(self.script.code))
        )

    def _concluded(self, kind: str, payload: Any) -> Ran:
        rejected = self._watch is not None and self._watch.rejected
        if (self.position or rejected) and (
            kind == "value" or not (payload[0] == "InternalError" or payload[3])
        ):
            # Calls that failed after the ending, nothing taking them, get their lines too
            # (not when the heap ran out: as the ending's own lines, see prelude.js), and so
            # do promises rejected with nothing to handle them. Only a run the log answered
            # calls in can have the first; only one the tracker saw a rejection in the second.
            try:
                self.settle("untaken")
                if kind == "value":
                    self.settle("returned")  # did code run after the return change it?
            except _quickjs.JSException:
                if self.ended:
                    raise _Ended from None
        never_called = None
        if kind == "value":
            try:
                ran = _finished(payload)
            except _NotData as e:
                message = f"the returned value {e}; return plainer data"
                ran = Ran(outcome="failed", error=ScriptError(name="TypeError", message=message))
            # A script that did nothing at all: did it only define functions?
            if payload == "u" and not self.position and not self.printed.total_bytes:
                never_called = self._never_called()
                if never_called is not None:
                    ran = Ran(outcome="failed", error=never_called)
        else:
            ran = self._failed(*payload)
        if ran.limit is None or ran.limit.name != "memory":
            foreach = self._warn_async_foreach()
            if not foreach and ran.outcome == "finished":
                self._warn_changed_after_return()
            if kind == "value" and payload == "u" and never_called is None:
                self._warn_bare_ending()
        return self._finish(ran)

    def _warn_bare_ending(self) -> None:
        """A line after the printed text when the script returned nothing and its last line
        is a bare name or member (`result`): the habit of a notebook, whose last expression
        is its answer; or a call of a function of the script's that gives a value (`main();`):
        the habit of a program. Only if that line is a statement of its own: the script parses
        with it returned (it is not the end of an expression begun above, `a +` then `b`).
        Else, when its last statement gives one name a value (`const summary = {...}`), a line
        saying to return that."""
        lines = source_lines(self.javascript, "javascript")
        number = len(lines)
        while number and (
            not lines[number - 1].strip() or lines[number - 1].lstrip().startswith("//")
        ):
            number -= 1
        if not number:
            return
        bare = _BARE_ENDING.fullmatch(lines[number - 1])
        fix = None
        if bare is not None and bare[1] not in _NOT_BARE:
            shown = bare[1]
            function = self._declared_function(shown)
            if function is not None:  # `main`: the answer is what it gives, not the function
                awaited = "await " if _ASYNC.search(function[0]) else ""
                fix = f"{awaited}{shown}()"
        elif (
            (call := _CALL_ENDING.fullmatch(lines[number - 1]))
            and ".then(" not in call[1]  # `main().then(console.log)` hands the value on
            and self._gives_value(call[2])
        ):
            shown = call[1]
        else:
            shown = None
        if shown is not None:
            patched = list(lines)
            patched[number - 1] = f"return ({shown});"
            if self._parses("\n".join(patched)):
                self.printed.write(warning_line(number, "Warning", bare_ending(shown, fix)))
                return
        declared = self._declared_last(lines, number)
        if declared is not None:
            line, name = declared
            if self._parses("\n".join([*lines, f"return {name};"])):
                self.printed.write(warning_line(line, "Warning", assigned_ending(name)))

    def _never_called(self) -> ScriptError | None:
        """Why a script that returned nothing, made no call and printed nothing failed when
        it only defines functions and calls none, so none of its code ran (its work in an
        ``async function main(args) {...}`` never called, or the script one ``async (input)
        => {...}``), else None. Read from the text: each statement at the left margin
        defines a function or data, and the last function's name is written nowhere outside
        it (a heuristic that errs toward None)."""
        if "function" not in self.javascript and "=>" not in self.javascript:
            return None
        lines = source_lines(self.javascript, "javascript")
        starts = [
            number
            for number, text in enumerate(lines, 1)
            if text[:1].strip() and text[:1] not in ")]}" and not text.startswith(("//", "/*", "*"))
        ]
        last = None
        for at, number in enumerate(starts):
            found = _DEFINES_FUNCTION.match(lines[number - 1])
            if found is not None:
                last = at, found
            elif _DEFINES_DATA.match(lines[number - 1]) is None:
                return None
        if last is None:
            return None
        at, found = last
        number = starts[at]
        name = found[1] or found[2] or found[3]
        call = ""
        if name is not None:
            end = starts[at + 1] - 1 if at + 1 < len(starts) else len(lines)
            outside = "\n".join(lines[: number - 1] + lines[end:])
            if re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", outside):
                return None  # called or handed on somewhere: not the case here
            arguments = "..." if _PARAMETERS.search(lines[number - 1]) else ""
            awaited = "await " if _ASYNC.search(found[0]) else ""
            call = f"return {awaited}{name}({arguments})"
        return ScriptError(
            name="Error", message=never_called(name, call), lines=[self._line(number)]
        )

    @staticmethod
    def _declared_last(lines: list[str], number: int) -> tuple[int, str] | None:
        """The line and name of the script's last statement when it declares one name
        (`const summary = {` and the lines of its value, `let total = a + b;`), read from the
        text: the last line that begins one at the left margin, every line after it up to
        ``number`` (the last that is not blank or a comment) indented or closing a bracket."""
        for at in range(number, 0, -1):
            text = lines[at - 1]
            found = _DECLARED.match(text)
            if found is not None:
                # A function declared last is not an answer left over (`main` never called),
                # and a statement after it on a line of its own (`let y = 1; x`) ends it.
                if _FUNCTION_VALUE.match(text, found.end()) or any(
                    _STATEMENT_AFTER.search(later) for later in lines[at - 1 : number]
                ):
                    return None
                return at, found[1]
            begins = text.strip() and not text[:1].isspace() and text[:1] not in ")]}"
            if begins and not text.startswith("//"):
                return None  # another statement begins after it
        return None

    def _gives_value(self, name: str) -> bool:
        """Whether ``name`` is a function the script declares that gives a value: declared
        (``function name``, ``const name = async () => {``) in a script that returns a value
        somewhere, or an arrow whose body is an expression (``const name = () => x``). Then
        a last line that calls it drops what it gives. (Read from the text: a heuristic that
        errs toward no line.)"""
        code, quoted = self.javascript, re.escape(name)
        assigned = rf"\b(?:const|let|var)\s+{quoted}\s*=\s*"
        if re.search(
            rf"{assigned}(?:async\s*)?(?:\([^()]*\)|[A-Za-z_$][\w$]*)\s*=>\s*[^\s{{]", code
        ):
            return True
        return self._declared_function(name) is not None and _RETURNS_VALUE.search(code) is not None

    def _declared_function(self, name: str) -> re.Match[str] | None:
        """Where the script declares ``name`` as a function (``async function name(``,
        ``const name = async () =>``), read from the text; it holds ``async`` when the
        function is async."""
        quoted = re.escape(name)
        return re.search(
            rf"(?<![\w$])(?:async\s+)?function\s*\*?\s*{quoted}\s*\("
            rf"|(?<![\w$])(?:const|let|var)\s+{quoted}\s*=\s*"
            r"(?:async\b|function\b|\(|[A-Za-z_$][\w$]*\s*=>)",
            self.javascript,
        )

    def _warn_async_foreach(self) -> bool:
        """A line after the printed text for each ``forEach(async ...)`` of the script;
        whether there was one."""
        code = self.script.code
        if ".forEach(" not in code:
            return False
        warned = False
        for match in _ASYNC_FOREACH.finditer(code):
            line = code.count("\n", 0, match.start()) + 1
            self.printed.write(warning_line(line, "Warning", _ASYNC_FOREACH_WARNING))
            warned = True
        return warned

    def _warn_changed_after_return(self) -> None:
        """A line after the printed text when code that waited on calls changed the returned
        value after the return (a forEach's line says as much, so it comes instead)."""
        if self._changed_after_return is None:
            return
        count, shown, stack = self._changed_after_return
        self._warn_at(stack, changed_after_return(count, shown))

    def _failed(self, name: str, message: str, stack: str, null: bool = False) -> Ran:
        limit = None
        if name in ("RangeError", "Error") and message in self.limit_errors:
            # A per-call limit the script did not catch: the run ended because it was met.
            limit = LimitMet(name=self.limit_errors[message], message=message)
        # QuickJS throws `null` when it cannot even allocate the out-of-memory error (most
        # runs that fill the heap end so), and nothing tells it from a script's own `throw
        # null` once the heap is unwound: a null thrown by a script that writes one
        # (`throw null`, `reject(null)`) is the script's, any other the memory limit. Only
        # the value null: a thrown string "null" (a template of a null, say) or an error that
        # mentions memory is the script's own.
        oom = (name == "InternalError" and message == "out of memory") or (
            null and not _THROWS_NULL.search(self.script.code)
        )
        if oom:
            # Reported as the memory limit met, as compute_ms is: not as the engine's error.
            name, message = "LimitError", self._memory_message()
            limit = LimitMet(name="memory", message=message)
        lines = self._lines(stack)
        if name == "SyntaxError" and not lines:
            lines = self._unplaced(message)
        elif name == "Uncaught" and not lines:
            lines = self._thrown_at(message)
        note = _syntax_note(lines[0].text) if name == "SyntaxError" and lines else ""
        if note:
            message += note
        elif name == "ReferenceError" and message.startswith("could not load module"):
            message += _NO_MODULES
        elif name == "SyntaxError" and lines and self._await_outside_async(lines[0].line):
            message += _AWAIT_OUTSIDE_ASYNC
        elif name == "ReferenceError" and (undefined := _NOT_DEFINED.fullmatch(message)):
            # `tools.get-price({...})` is `tools.get - price(...)`: "price is not defined".
            hyphened = lines and hyphened_reference(undefined[1], self.tool_names, lines[0].text)
            if hyphened:
                message = hyphened
            else:
                message += self.tool_hint(undefined[1], "{...}") or _HOST_GLOBALS.get(
                    undefined[1], ""
                )
        elif (name, message) in _SAID_IN_FULL:
            message = _SAID_IN_FULL[name, message]
        elif name == "TypeError" and message == "not a function":
            callee = self._not_a_function(stack)
            if callee is not None:
                message = f"{callee} is not a function"
        elif name == "TypeError" and (read_only := _READ_ONLY.fullmatch(message)):
            assigned = self._const_assigned(read_only[1], lines)
            if assigned is not None:
                message += _CONST_AGAIN
                lines[:1] = [assigned]
        return Ran(
            outcome="failed",
            error=ScriptError(
                name=_cut(name, ERROR_NAME_BOUND),
                message=_cut(message, ERROR_MESSAGE_BOUND),
                lines=lines,
            ),
            limit=limit,
        )

    def _from_exception(self, text: str) -> Ran:
        # "Name: message\n    at ... (<input>:L:C)\n" as the context reports an uncaught error.
        first, _, rest = text.partition("\n")
        name, sep, message = first.partition(": ")
        if not sep:
            name, message = "Error", first
        # A job that threw null outside any promise: the heap could not hold even the error
        # (the promise of the job's reaction could not be made), as _failed reads a null.
        ran = self._failed(name, message, rest, first == "null" and not rest.strip())
        if name == "SyntaxError" and not ran.error.lines:  # type: ignore[union-attr]
            ran.error.lines = self._lines(first)  # type: ignore[union-attr]
        return self._finish(ran)

    def _not_a_function(self, stack: str) -> str | None:
        """The callee of the script's call that QuickJS said is "not a function", read at the
        place its innermost frame names, when that is a line of the script (see _callee)."""
        found = _FIRST_FRAME.search(stack.lstrip("\n").partition("\n")[0])
        if found is None or _PROTOCOL_OF_ITS_OWN.search(self.javascript):
            return None
        number, column = int(found[1]), int(found[2])
        lines = source_lines(self.javascript, "javascript")
        if not 1 <= number <= min(len(lines), len(self.script_lines)):
            return None
        if number == 1:
            column -= _FIRST_LINE_COLUMNS
        return _callee(lines, number, column)

    def _unplaced(self, message: str) -> list[ErrorLine]:
        """The line of a SyntaxError QuickJS gives no position for: a regex literal that is
        no regex (`/(abc/`: "expecting ')'"), found as the first literal on the script's lines
        that fails so; a private name no class declares (`this.#y`), as its first use."""
        private = _UNDECLARED_PRIVATE.fullmatch(message)
        found = re.compile(re.escape(private[1]) + r"(?![\w$])") if private else None
        ctx: Any = None
        tried = 0
        for number, text in enumerate(source_lines(self.javascript, "javascript"), 1):
            if found is not None:
                if found.search(text):
                    return [self._line(number)]
                continue
            for literal in _REGEX_LITERAL.finditer(text):
                tried += 1
                if tried > _LITERAL_TRIES:
                    return []
                ctx = ctx or self._parser()
                try:
                    ctx.eval(literal[0])
                except _quickjs.JSException as e:
                    if str(e).partition("\n")[0] == "SyntaxError: " + message:
                        return [self._line(number)]
        return []

    def _thrown_at(self, shown: str) -> list[ErrorLine]:
        """The line of the script's `throw` of the text or number it failed with, ``shown``
        (a value that is no Error has no stack, and named no line): the one `throw` of a
        literal that gives that value, else none."""
        found: set[int] = set()
        ctx: Any = None
        code = self.javascript
        shown = "" if shown == '""' else shown  # an empty text is said so
        if _REJECTS.search(code):
            return []  # the value may be a promise's, rejected with it
        for tried, thrown in enumerate(_THROWN_LITERAL.finditer(code)):
            if len(found) > 1 or tried >= _LITERAL_TRIES:
                return []
            literal = thrown[1]
            if literal.startswith("`"):
                if not _fills(_TEMPLATE_HOLE.split(literal[1:-1]), shown):
                    continue
            else:
                ctx = ctx or self._parser()
                try:
                    if ctx.eval(f"String({literal})") != shown:
                        continue
                except _quickjs.JSException:
                    continue
            found.add(len(source_lines(code[: thrown.start()], "javascript")))
        if len(found) != 1:
            return []
        number = found.pop()
        return [self._line(number)]

    def _const_assigned(self, name: str, lines: list[ErrorLine]) -> ErrorLine | None:
        """The line of the script that gives its const ``name`` another value, for an error
        that says ``name`` is read-only at ``lines`` (None: ``name`` is no const of the
        script, a property's, as a frozen object's). Where QuickJS's line has no such
        assignment (it names the statement after it), the first after the declaration."""
        code = self.javascript
        declared = _const_declared(name).search(code)
        if declared is None:
            return None
        assignment = _assigned(name)
        if lines and assignment.search(self.script_lines[lines[0].line - 1]):
            return lines[0]
        found = assignment.search(code, declared.end())
        if found is None:
            return None
        number = len(source_lines(code[: found.start()], "javascript"))
        return self._line(number)

    def _await_outside_async(self, line: int) -> bool:
        """Whether the script's SyntaxError at ``line`` is an ``await`` where it cannot be:
        the script does not parse (not a SyntaxError its code threw, as JSON.parse's), and it
        does once that line's awaits are blanked. Each parse is in a context of its own."""
        lines = source_lines(self.javascript, "javascript")
        if not 1 <= line <= len(lines) or not _AWAIT.search(lines[line - 1]):
            return False
        patched = list(lines)
        patched[line - 1] = _AWAIT.sub("     ", lines[line - 1])
        return not self._parses("\n".join(lines)) and self._parses("\n".join(patched))

    def _parses(self, body: str) -> bool:
        """Whether ``body`` parses as the body of an async function."""
        ctx = self._parser()
        try:
            ctx.eval("throw 0; async function f() {" + body + "\n}")
        except _quickjs.JSException as e:
            return not str(e).startswith("SyntaxError")
        return True

    def _parser(self) -> Any:
        """A context of its own to parse the script's text in, as ``compile`` in prelude.js
        parses it, under the script's memory and stack limits."""
        ctx = _quickjs.Context()
        ctx.set_memory_limit(self.limits.memory)
        ctx.set_max_stack_size(JS_STACK_BYTES)
        return ctx

    def _line(self, number: int) -> ErrorLine:
        """The script's line ``number`` (from 1), as an error names it."""
        return ErrorLine(line=number, text=self.script_lines[number - 1][:300])

    def stop_lines(self, frame: FrameType | None) -> list[ErrorLine]:
        # Called from QuickJS's interrupt poll: the prelude's `here` reads the frames under it.
        # The run has 8% of compute_ms (40 ms at most) to end before the hard stop ends the
        # process, and what it printed with it: `here`'s allocation collected a heap grown
        # without one first, in as long.
        if self._here is None:
            return []
        _hold_gc(self.ctx)
        return self._lines(self._here())

    def _lines(self, stack: str) -> list[ErrorLine]:
        """The script's own lines named in a stack, numbered as the model wrote them."""
        lines: list[ErrorLine] = []
        for match in _FRAME.finditer(stack):
            number = int(match.group(1))  # the wrapper's first line is the script's
            if 1 <= number <= len(self.script_lines) and all(x.line != number for x in lines):
                lines.append(self._line(number))
            if len(lines) >= 8:
                break
        return lines


class Prepared:
    """A QuickJS context with the prelude already compiled, made before the script exists.

    Compiling the prelude is most of a trivial run's cost; a fork server makes one of these
    before it forks, so every child starts with it. It serves one run (a process runs one
    script); the host functions it registers call into whichever run took it.
    """

    def __init__(self) -> None:
        self.ctx = _quickjs.Context()
        _watch_cpu(self.ctx)
        self._functions: dict[str, Any] | None = None
        for name in _HOST_FUNCTIONS:
            self.ctx.add_callable("__cm_" + name, self._dispatch(name))
        self.ctx.add_callable("__cm_source", _lazy_source)
        self.start = self.ctx.eval("\n" * PRELUDE_LINE + _BOOT)(PRELUDE_LINE)
        self.watch = rejections.watch(self.ctx, self.start(None, "rejection"))
        self.here = self.start(None, "here")
        self.stripper = typescript.Stripper.compiled()
        self.heap_walk: tuple[float, float, int] | None = None

    def count_heap(self) -> None:
        """Count the heap now, in the process that will run the script (a forked child,
        before its script): the run that takes the context starts from this count, as if
        it had taken it (a trivial run's own walk of the prelude's objects was 60% of its
        CPU in the process)."""
        self.heap_walk = _walk_heap(self.ctx, cpu_ms())

    def _dispatch(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            functions = self._functions
            return "x" if functions is None else functions[name](*args)

        return call

    def take(self, run: Run) -> bool:
        """Give the context to ``run``; False if another run had it already."""
        if self._functions is not None:
            return False
        self._functions = run._host_functions()
        return True


def new_run(
    script: Script,
    channel: Channel,
    fetch: Fetch | None = None,
    prepared: Prepared | None = None,
) -> Replay:
    """A run of ``script`` in its language's binding (``prepared`` serves JavaScript only)."""
    if script.language == "python":
        # Imported on first use: a process that runs only JavaScript never loads it (a
        # sandbox process that runs Python imported it while warming up, before lockdown).
        from sandbox import python

        return python.Run(script, channel, fetch)
    return Run(script, channel, fetch, prepared)


def run_in_process(
    script: Script, fetch: Fetch | None = None, prepared: Prepared | None = None
) -> Ran:
    """Run ``script`` in this process, with no confinement at all.

    For tests of the script semantics and for the benchmark's floor; never for a model's
    script on a host. ``fetch(file_id, offset, length)`` gives file bytes.
    """
    channel = _Collect()
    run = new_run(script, channel, fetch, prepared)
    try:
        return run.execute()
    except _Ended:
        assert channel.ran is not None
        return channel.ran
    finally:
        run.release()


class LiveInProcess:
    """A live run in this process: it stops at each step's calls and is resumed with their
    records, as a live sandbox process is (no confinement at all; for tests and the engine's
    in-process runner, never for a model's script on a host).

    ``start()`` runs to the first stop; ``resume(records)`` goes on with exactly the records
    of the calls of the last ``Ran`` (raises :class:`ResumeError`, the run left as it was,
    for any others); ``close()`` lets the run go. The script must be version 2 or later.
    """

    def __init__(
        self, script: Script, fetch: Fetch | None = None, prepared: Prepared | None = None
    ) -> None:
        if script.version < LIVE_VERSION:
            raise ValueError(
                f"a live run needs a script of version {LIVE_VERSION} or later, not "
                f"{script.version}"
            )
        self._channel = _Collect()
        self._run: Replay | None = new_run(script, self._channel, fetch, prepared)
        self._known = len(script.records)
        self.started = False

    @property
    def waiting(self) -> int:
        """How many records the run waits for (0 when it ended or was closed)."""
        run = self._run
        return len(run.new_calls) if run is not None and run.resumable else 0

    @property
    def known(self) -> int:
        """The records the run holds: those it started with and those it was resumed with."""
        return self._known

    @property
    def memory_bytes(self) -> int:
        """The heap the run's script holds now."""
        run = self._run
        return 0 if run is None else run.heap_bytes()

    def start(self) -> Ran:
        if self.started or self._run is None:
            raise ResumeError("the run was started already")
        self.started = True
        return self._segment(self._run.execute)

    def resume(self, records: list[Record]) -> Ran:
        run = self._run
        if run is None:
            raise ResumeError("the run was closed")
        problem = run.resume_problem(records)
        if problem is not None:
            raise ResumeError(problem)
        self._known += len(records)
        return self._segment(lambda: run.resume(records))

    def close(self) -> None:
        if self._run is not None:
            self._run.release()
        self._run = None

    def _segment(self, go: Any) -> Ran:
        try:
            ran: Ran = go()
        except _Ended:
            assert self._channel.ran is not None
            ran = self._channel.ran
        if ran.outcome != "calls":
            self.close()  # the run is over: let its context go
        return ran


def _walk_heap(ctx: Any, now: float) -> tuple[float, float, int]:
    """Count ``ctx``'s heap (a walk of every object), begun at CPU ms ``now``: (the CPU ms
    after it, the CPU to wait before the next count, the count); see ``Run.heap_bytes``."""
    heap = int(ctx.memory().get("memory_used_size", 0))
    after = cpu_ms()
    return (after, (after - now) * HEAP_WALK_SHARE, heap)
