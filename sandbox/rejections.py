"""Promises that failed with nothing to handle them: QuickJS's promise rejection tracker.

An async function a script calls without ``await`` (``main();``) that throws leaves a rejected
promise nothing watches; without this its error went nowhere and the script "finished". The
Python binding does not expose the tracker QuickJS has for this
(``JS_SetHostPromiseRejectionTracker``), so it is set here through ctypes, on the binding's
own copy of QuickJS. The tracker calls a function of the prelude's with the promise as
``this`` and ``(reason, handled)``: ``0`` when the promise is rejected with no handler, ``1``
when a handler is added to such a promise later. The prelude keeps the promises and prints
those left when the run ends (see ``rejection`` in prelude.js).

The binding's objects are read at offsets this module checks before it uses them (a
context's runtime and context pointers, an object's context and value): a binding laid out
otherwise gets no tracker, and a run goes on as it did without one. The callback is made at
import, before lockdown: libffi makes its code then, which seccomp would refuse later.
"""

from __future__ import annotations

import ctypes
from typing import Any

import _quickjs

__all__ = ["Watch", "watch"]


class _Value(ctypes.Structure):
    """A ``JSValue`` of a 64-bit build: a word of payload and a tag (no NaN boxing)."""

    _fields_ = [("u", ctypes.c_uint64), ("tag", ctypes.c_int64)]


class _Hook(ctypes.Structure):
    """The tracker's opaque pointer: the prelude's function, whether any promise was rejected
    with no handler (the host then asks the prelude for its lines), whether one was with null
    (what QuickJS throws when the heap cannot hold even its out-of-memory error), and whether
    one was with that error (the prelude's function answers 1)."""

    _fields_ = [
        ("function", _Value),
        ("rejected", ctypes.c_int),
        ("null", ctypes.c_int),
        ("out_of_memory", ctypes.c_int),
    ]


# The same in every QuickJS: an int32 payload; null; an object (a pointer to it).
_JS_TAG_INT, _JS_TAG_NULL, _JS_TAG_OBJECT = 0, 2, -1
# A pointer's size: the offsets below are those of a 64-bit build.
_WORD = ctypes.sizeof(ctypes.c_void_p)
_HEAD = 2 * _WORD  # PyObject_HEAD: the reference count and the type
# The binding's structs: ContextData {HEAD; JSRuntime *runtime; JSContext *context; ...};
# ObjectData {HEAD; ContextData *context; JSValue object}.
_RUNTIME_AT, _CONTEXT_AT = _HEAD, _HEAD + _WORD
_OBJECT_CONTEXT_AT, _OBJECT_VALUE_AT = _HEAD, _HEAD + _WORD

_TRACKER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, _Value, _Value, ctypes.c_bool, ctypes.c_void_p)


def _library() -> Any:
    if _WORD != 8:
        return None
    try:
        lib = ctypes.CDLL(_quickjs.__file__)
        lib.JS_GetRuntime.restype = ctypes.c_void_p
        lib.JS_GetRuntime.argtypes = [ctypes.c_void_p]
        lib.JS_Call.restype = _Value
        lib.JS_Call.argtypes = [
            ctypes.c_void_p,
            _Value,
            _Value,
            ctypes.c_int,
            ctypes.POINTER(_Value),
        ]
        lib.JS_FreeValue.restype = None
        lib.JS_FreeValue.argtypes = [ctypes.c_void_p, _Value]
        lib.JS_HasException.restype = ctypes.c_bool
        lib.JS_HasException.argtypes = [ctypes.c_void_p]
        lib.JS_GetException.restype = _Value
        lib.JS_GetException.argtypes = [ctypes.c_void_p]
        lib.JS_SetHostPromiseRejectionTracker.restype = None
        lib.JS_SetHostPromiseRejectionTracker.argtypes = [
            ctypes.c_void_p,
            _TRACKER,
            ctypes.c_void_p,
        ]
    except (OSError, AttributeError):  # not the binding this module knows
        return None
    return lib


_lib = _library()


def _track(
    ctx: int | None, promise: _Value, reason: _Value, handled: bool, opaque: int | None
) -> None:
    if not ctx or not opaque:
        return
    hook = _Hook.from_address(opaque)
    if not handled:
        hook.rejected = 1
        if reason.tag == _JS_TAG_NULL:
            hook.null = 1
    # An exception already pending is the engine's to deliver: nothing runs over it.
    if _lib.JS_HasException(ctx):
        return
    argv = (_Value * 2)(reason, _Value(1 if handled else 0, _JS_TAG_INT))
    answer = _lib.JS_Call(ctx, hook.function, promise, 2, argv)
    if _lib.JS_HasException(ctx):  # the heap full: a line less, and the run goes on
        _lib.JS_FreeValue(ctx, _lib.JS_GetException(ctx))
    elif not handled and answer.tag == _JS_TAG_INT and answer.u == 1:
        hook.out_of_memory = 1  # QuickJS's out-of-memory error (see `rejection`)
    _lib.JS_FreeValue(ctx, answer)


_tracker = _TRACKER(_track) if _lib is not None else None
_NO_TRACKER = _TRACKER()  # a null function pointer


def _word(address: int) -> int:
    return ctypes.c_void_p.from_address(address).value or 0


class Watch:
    """The tracker set on one context's runtime. Holds the context and the prelude's
    function for as long as the tracker may call it: keep it as long as the context."""

    def __init__(self, ctx: _quickjs.Context, function: Any, hook: _Hook, runtime: int) -> None:
        self.ctx = ctx
        self.function = function
        self._hook = hook
        self._runtime = runtime

    def __del__(self) -> None:
        # The context is alive still (this holds it): the tracker must not outlive the hook.
        if _lib is not None:
            _lib.JS_SetHostPromiseRejectionTracker(self._runtime, _NO_TRACKER, None)

    @property
    def rejected(self) -> bool:
        """Whether a promise was rejected with no handler since the watch began."""
        return bool(self._hook.rejected)

    @property
    def rejected_with_null(self) -> bool:
        """Whether a promise was rejected with null, and no handler, since the watch began."""
        return bool(self._hook.null)

    @property
    def rejected_out_of_memory(self) -> bool:
        """Whether a promise was rejected with QuickJS's out-of-memory error, and no handler,
        since the watch began."""
        return bool(self._hook.out_of_memory)


def watch(ctx: _quickjs.Context, function: Any) -> Watch | None:
    """Call ``function`` (a ``_quickjs.Object`` of ``ctx``'s) on every rejection in ``ctx``,
    as the module docstring says; ``None`` (no tracker) when the binding is not laid out as
    this module reads it."""
    if _lib is None or _tracker is None or not isinstance(function, _quickjs.Object):
        return None
    runtime = _word(id(ctx) + _RUNTIME_AT)
    context = _word(id(ctx) + _CONTEXT_AT)
    if (
        not runtime
        or not context
        or _lib.JS_GetRuntime(context) != runtime
        or _word(id(function) + _OBJECT_CONTEXT_AT) != id(ctx)
    ):
        return None
    value = _Value.from_address(id(function) + _OBJECT_VALUE_AT)
    if value.tag != _JS_TAG_OBJECT or not value.u:
        return None
    hook = _Hook(_Value(value.u, value.tag), 0, 0, 0)
    _lib.JS_SetHostPromiseRejectionTracker(runtime, _tracker, ctypes.addressof(hook))
    return Watch(ctx, function, hook, runtime)
