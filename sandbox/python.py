"""Runs one Python script: the Python binding of the replay core (sandbox/replay.py).

CPython itself runs the script, in the same confined process as JavaScript: the OS lockdown
(seccomp, rlimits, ``nobody``, no environment) is the boundary. Inside the interpreter there
is a second fence, defence in depth, never the boundary:

- The script is parsed, checked and compiled as the body of ``async def`` (so its lines are
  the model's own). The check refuses attribute names that start with an underscore
  (``x.__class__``, ``self._x``), the frame and code attributes of generators, coroutines,
  tracebacks and frames (``f_``, ``gi_``, ``cr_``, ``ag_``, ``tb_``, ``co_``), dunder names
  (``__builtins__``, ``__import__``), the same in ``match`` class patterns and in string
  annotations (which ``typing`` may evaluate), and relative imports. ``x.format`` and
  ``x.format_map`` go through a formatter that refuses the same attribute names in fields.
- Builtins are an allowlist: no ``open``, ``eval``, ``exec``, ``compile``, ``globals``,
  ``locals``, ``vars``, ``breakpoint``, ``input``, ``help``, ``exit``; ``getattr``,
  ``hasattr``, ``setattr``, ``delattr`` refuse what the check refuses; ``__import__`` gives
  only :data:`ALLOWED` modules, each as a proxy that exposes its public names and no module
  (``typing.sys`` is not there), with the clock, random numbers and ``uuid4`` of the run.
- Printed text (``print``, and anything written to ``sys.stdout``/``sys.stderr`` while the
  script runs) goes to the run's bounded printed text, never to the protocol's descriptors.

The script's coroutines run under a small scheduler of this module's own (no asyncio event
loop: it needs system calls the filter forbids). A tool call is made when the script calls
``tools.name(...)`` (as in JavaScript); a recorded call's result settles per the replay
core's rules; a call past the log never settles in this run. ``asyncio.gather`` runs its
coroutines in argument order, so calls that do not depend on each other are one step.
"""

from __future__ import annotations
import __future__

import _string
import _strptime  # noqa: F401 - datetime and time import it on first use, from C
import _thread
import abc
import array
import ast
import base64
import binascii
import bisect
import builtins
import calendar
import cmath
import collections
import collections.abc
import contextlib
import copy
import csv
import dataclasses
import datetime as _datetime
import decimal
import difflib
import enum
import fnmatch
import fractions
import functools
import gc
import gzip
import hashlib
import heapq
import hmac
import html
import inspect
import io
import ipaddress
import itertools
import json
import keyword
import logging
import math
import numbers
import operator
import pprint
import random as _random
import re
import shlex
import statistics
import string
import struct
import sys
import textwrap
import time as _time
import types
import typing
import unicodedata
import urllib.parse
import uuid as _uuid
import warnings
import weakref
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, NoReturn, cast

import orjson

from sandbox import jsontext
from sandbox.files import Fetch
from sandbox.jsontext import ITEM_WEIGHT, text_weight
from sandbox.names import closest_names, no_such_tool, unwritable_tool
from sandbox.protocol import (
    ERROR_MESSAGE_BOUND,
    ERROR_NAME_BOUND,
    MAX_DEPTH,
    VALUE_BOUND,
    ErrorLine,
    LimitMet,
    Ran,
    Script,
    ScriptError,
    data_path,
    with_article,
)
from sandbox.replay import (
    Channel,
    Replay,
    _cut,
    _Ended,
    _finished,
    _NotData,
    assigned_ending,
    bare_ending,
    never_called,
    unawaited,
    warning_line,
)

__all__ = ["ALLOWED", "Run", "check", "warm_up_code"]

FILENAME = "<script>"
# The function the script is the body of (popped from its globals before it runs), and a
# name the compiled script uses that no script can write (not an identifier).
_MAIN = "script"
_FORMAT = "$format"
# A script's `x._name`, as `$private(x, "_name").value` (see _Private).
_PRIVATE = "$private"
# A script's `x.now` (and the other readers of the clock), as `$clock(x).now`: the run's
# fixed clock, however the script reached a date or datetime class (see _clock_view).
_CLOCK = "$clock"
_CLOCK_READERS = frozenset({"now", "today", "utcnow", "fromtimestamp", "utcfromtimestamp"})
# A `match` class pattern with positional sub-patterns, `case A(x)`, as `case $matchN.cls(x)`
# (see _rewrite_matches).
_MATCH = "$match"

# Python's own recursion bound, frames over those below the script's, set while a script
# runs: deep recursion is a RecursionError the script may catch, well before the 8 MiB C
# stack could overflow.
RECURSION_LIMIT = 1000
# Kept while a script runs and let go when it meets MemoryError, so that the run can still
# report how it ended.
_RESERVE_BYTES = 1024 * 1024

# The modules a script may import (pure, nothing that reaches the system).
ALLOWED = (
    "abc",
    "array",
    "asyncio",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "collections",
    "collections.abc",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "math",
    "numbers",
    "operator",
    "pprint",
    "random",
    "re",
    "shlex",
    "statistics",
    "string",
    "struct",
    "sys",
    "textwrap",
    "time",
    "traceback",
    "types",
    "typing",
    "unicodedata",
    "urllib.parse",
    "uuid",
    "warnings",
    "zlib",
)

# Attribute prefixes of frames, code, generators, coroutines, async generators, tracebacks.
_FRAME_PREFIXES = ("f_", "gi_", "cr_", "ag_", "tb_", "co_")


# Dunder attributes a script may use: plain text (``type(e).__name__``), and ``__init__``
# (``super().__init__(...)``), whose function reaches nothing without another dunder.
_TEXT_DUNDERS = frozenset({"__name__", "__qualname__", "__doc__", "__init__"})
# What to write instead of the dunders models reach for.
_DUNDER_HINTS = {
    "__class__": ": write type(x) for its class (type(self).__name__ for its name)",
    "__dict__": (
        ": read the attributes by name, or dataclasses.asdict(x) for a dataclass's fields"
    ),
    **dict.fromkeys(
        ("__cause__", "__context__"),
        ": catch the error where it is raised (an uncaught error's message says what it was "
        "raised from)",
    ),
}


# A named tuple's own API (collections.namedtuple, typing.NamedTuple, and urlsplit's,
# difflib's, statistics' results): one underscore, so as not to clash with its fields. Pure
# functions of the tuple; nothing else a script can reach has attributes of these names.
_NAMED_TUPLE_API = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})


_NO_OBJECT = object()


def _refused_attribute(name: str, obj: Any = _NO_OBJECT) -> str | None:
    """Why a script may not use attribute ``name`` (of ``obj``, when given), or None."""
    if name.startswith("_") and name not in _TEXT_DUNDERS and name not in _NAMED_TUPLE_API:
        if obj is not _NO_OBJECT and _private_name(name) and _scripts_own(obj):
            return None
        if _private_name(name):
            return (
                f"the attribute {name!r}: attributes whose names start with an underscore are "
                "available in scripts only on objects of the script's own classes"
            )
        return (
            f"the attribute {name!r}: attributes whose names start with an underscore are not "
            f"available in scripts{_DUNDER_HINTS.get(name, ' (name your own without it)')}"
        )
    if name.startswith(_FRAME_PREFIXES):
        return (
            f"the attribute {name!r}: frame, code and traceback attributes "
            f"({', '.join(_FRAME_PREFIXES)}) are not available in scripts"
        )
    if name == "mro":
        # A class's bases: a safe class of the sandbox is a subclass of the real one.
        return "the attribute 'mro': the classes a class comes from are not available in scripts"
    return None


def _private_name(name: str) -> bool:
    """One leading underscore: ``_cache``, not ``__class__`` nor ``__secret``."""
    return name.startswith("_") and not name.startswith("__")


def _unmarked_plain(bases: tuple[Any, ...]) -> bool:
    """Whether a class statement's ``bases`` (``Generic[T]`` as the class it stands for) are
    all plain (``_PLAIN_BASES``, built-in exceptions), none of them a class of the script's
    already."""
    try:
        classes = types.resolve_bases(bases)
    except Exception:
        return False  # the class statement itself says what is wrong with them
    return all(
        isinstance(c, type) and (id(c) in _PLAIN_BASES or id(c) in _BUILTIN_EXCEPTIONS)
        for c in classes
    )


class _ScriptBase:
    """Of every class a class statement of a script makes (through its run's ScriptObject,
    see _Identities): the mark that an object's attributes are the script's own."""

    __slots__ = ()


_MRO = type.__dict__["__mro__"]  # a class's real MRO, whatever its metaclass says
_SUPER_SELF_CLASS = super.__dict__["__self_class__"]
_SUPER_SELF = super.__dict__["__self__"]
_BUILTIN_EXCEPTIONS = frozenset(
    id(value)
    for value in vars(builtins).values()
    if isinstance(value, type) and issubclass(value, BaseException)
)
# Bases whose instances hold no attribute with one underscore but what a script puts there:
# a class a script's class statement makes on them is its own (see _scripts_own): it gets
# the mark (see _Identities), so its objects' repr and hash are the same on every run too.
_PLAIN_BASES = frozenset(
    map(id, [object, abc.ABC, typing.Generic, dict, list, set, frozenset, tuple, str, int, float])
)


def _scripts_own(obj: Any) -> bool:
    """True when every class ``obj``'s attributes come from is one a class statement of the
    script made, ``object`` or a built-in exception: its attributes named with one underscore
    are then what the script put there. Not when a class of the sandbox or of a module is
    among them (a mixin of the script's), nor for a class whose metaclass is not ``type``."""
    kind = type(obj)
    if kind is super:
        kind = _SUPER_SELF_CLASS.__get__(obj)
        if kind is None:
            return False
    elif issubclass(kind, type):
        if kind is not type:
            return False
        kind = obj
    known = _OWN_CLASSES.get(id(kind))
    if known is not None:
        return known[1]
    mro = _MRO.__get__(kind)
    # A plain base counts only under a class of the script's: a str of its own is no object
    # of the script's classes.
    marked = any(c is _ScriptBase for c in mro)
    own = all(
        c is object
        or id(c) in _BUILTIN_EXCEPTIONS
        or (marked and id(c) in _PLAIN_BASES)
        or any(k is _ScriptBase for k in _MRO.__get__(c))
        for c in mro
    )
    _OWN_CLASSES[id(kind)] = (kind, own)
    return own


# _scripts_own's answer for each class it was asked about (a class's MRO never changes: a
# script cannot set __bases__), by id, with the class held so that no other takes its id.
# A process runs one script: the classes it keeps are that script's few.
_OWN_CLASSES: dict[int, tuple[type, bool]] = {}


def _safe_super(*args: Any) -> Any:
    """``super``, from a class that is not the sandbox's own. The sandbox's safe classes
    (``string.Formatter``, ``datetime.datetime``, ``random.Random``, ...) are subclasses of
    the real ones, whose methods ``super(SafeClass, obj)`` would reach unchecked (the real
    formatter's get_field, the host's clock). ``super()`` in a method of a script's class
    works as ever: its class and first argument are taken from the caller's frame, as the
    built-in takes them."""
    if not args:
        frame = sys._getframe(1)
        code = frame.f_code
        if "__class__" not in code.co_freevars:
            raise RuntimeError("super(): __class__ cell not found (call it in a method)")
        if not code.co_argcount + code.co_posonlyargcount:
            raise RuntimeError("super(): no arguments")
        found = frame.f_locals
        args = (found["__class__"], found[code.co_varnames[0]])
        del frame, found
    start = args[0]
    if isinstance(start, type) and _sandbox_class(start):
        raise TypeError(
            f"super({start.__name__}, ...): a class of the sandbox's own is not a place "
            "super() may start from in a script; use it in your own classes' methods"
        )
    return builtins.super(*args)


def _sandbox_class(cls: type) -> bool:
    """Whether ``cls`` is a class of the sandbox's: one whose own methods are this file's
    code (its safe classes say they are of ``datetime`` or ``string`` in their reprs)."""
    for value in vars(cls).values():
        function = getattr(value, "__func__", value)  # a classmethod's or staticmethod's
        if isinstance(value, property):
            function = value.fget
        code = getattr(function, "__code__", None)
        if code is not None and code.co_filename == __file__:
            return True
    return False


def _made_once(obj: Any, slot: str) -> None:
    """Refuse ``obj.__init__`` called again (a script may call ``__init__``, for its own
    classes' ``super().__init__``): a module or ``tools`` made anew would say what the
    script chose, a call answered with no call made."""
    try:
        object.__getattribute__(obj, slot)
    except AttributeError:
        return
    raise TypeError(f"{type(obj).__name__} objects cannot be made again")


class _Sealed(type):
    """The type of the sandbox's classes a script can reach (``type(tools)``, a task's, the
    error classes it names in ``except ToolError``): read-only, so a script cannot change
    them for the code that uses them (``copy`` sets attributes by name, dunders included).
    This module may set them while it loads (``_SEALED`` false)."""

    def __setattr__(cls, key: str, value: Any) -> None:
        if _SEALED:
            raise AttributeError(f"{_TYPE_NAME.__get__(cls)} is read-only in scripts")
        super().__setattr__(key, value)

    def __delattr__(cls, key: str) -> None:
        if _SEALED:
            raise AttributeError(f"{_TYPE_NAME.__get__(cls)} is read-only in scripts")
        super().__delattr__(key)


class _Opaque(metaclass=_Sealed):
    """Objects of the sandbox that a script holds: not to be copied or pickled, nor
    subclassed by a script (the scheduler trusts a future's state; a subclass could leave
    it unset), their classes read-only."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if _SEALED:
            raise TypeError(f"{_TYPE_NAME.__get__(cls.__mro__[1])} cannot be subclassed")
        super().__init_subclass__(**kwargs)

    def __copy__(self) -> NoReturn:
        raise TypeError(f"{type(self).__name__} objects cannot be copied")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} objects cannot be copied")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} objects cannot be pickled or copied")


_TYPE_NAME = type.__dict__["__name__"]
_TYPE_MODULE = type.__dict__["__module__"]
_TRACEBACK = BaseException.__dict__["__traceback__"]
_ATTRIBUTE_OBJ = AttributeError.__dict__["obj"]
_ATTRIBUTE_NAME = AttributeError.__dict__["name"]
_ARGS = BaseException.__dict__["args"]
# What C code says with a MemoryError when an allocation failed (CPython's compression
# modules: zlib, gzip), as the interpreter says nothing: the heap's limit, not the script's
# own `raise MemoryError("...")`.
_ALLOCATION_FAILED = frozenset(
    {
        ("Unable to allocate output buffer.",),
        ("Out of memory while compressing data",),
        ("Out of memory while decompressing data",),
        ("Can't allocate memory for compression object",),
        ("Can't allocate memory for decompression object",),
    }
)
_SEALED = False


def _type_name(value: Any) -> str:
    """The name of ``value``'s class, as the class was made: a script's metaclass may make
    ``__name__`` a property that raises or gives no string."""
    return str(_TYPE_NAME.__get__(type(value)))


# ---- the check and the compiler ----


class Refused(Exception):
    """A script that uses something scripts may not; ``line`` is its line (1-based)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _check_name(node: ast.AST, name: str | None) -> None:
    if name and name.startswith("__") and name.endswith("__") and name != "__name__":
        raise Refused(
            getattr(node, "lineno", 0),
            f"the name {name!r}: dunder names are not available in scripts",
        )


def _check_annotation(annotation: ast.AST | None) -> None:
    """String annotations can be evaluated (``typing``): their text passes the check too."""
    if annotation is None:
        return
    for node in ast.walk(annotation):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                tree = ast.parse(node.value, mode="eval")
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue  # text that does not parse cannot be evaluated either
            try:
                check(tree)
            except Refused as e:
                raise Refused(node.lineno, f"a string annotation uses {e.message}") from None


def check(tree: ast.AST, rewrite: bool = False) -> None:
    """Raise :class:`Refused` for the first construct scripts may not use.

    With ``rewrite``, ``x.format`` and ``x.format_map`` read as an attribute become
    ``$format(x).format``: :func:`_format_view` gives a string's safe formatter. And
    ``x._name`` (one underscore) becomes ``$private(x, "_name").value``, which
    :class:`_Private` allows on the script's own objects only; without ``rewrite`` it is
    refused.
    """
    for node in ast.walk(tree):
        kind = type(node)
        if kind is ast.Attribute:
            name = node.attr  # type: ignore[attr-defined]
            why = _refused_attribute(name)
            if why is not None and rewrite and _private_name(name):
                _rewrite_private(node)  # type: ignore[arg-type]
                continue
            if why is not None:
                raise Refused(node.lineno, why)  # type: ignore[attr-defined]
            if rewrite and name in ("format", "format_map") and type(node.ctx) is ast.Load:  # type: ignore[attr-defined]
                _wrap_value(node, _FORMAT)  # type: ignore[arg-type]
            elif rewrite and name in _CLOCK_READERS and type(node.ctx) is ast.Load:  # type: ignore[attr-defined]
                _wrap_value(node, _CLOCK)  # type: ignore[arg-type]
        elif kind is ast.Name:
            _check_name(node, node.id)  # type: ignore[attr-defined]
        elif kind is ast.arg:
            _check_name(node, node.arg)  # type: ignore[attr-defined]
            _check_annotation(node.annotation)  # type: ignore[attr-defined]
        elif kind in _CHECKED:
            _check_other(node)


def _wrap_value(node: ast.Attribute, helper: str, *more: str) -> None:
    """``x.name`` as ``helper(x, *more).name``, in place (at ``x``'s location)."""
    value = node.value
    args: list[ast.expr] = [value, *(ast.Constant(m) for m in more)]
    call = ast.Call(func=ast.Name(id=helper, ctx=ast.Load()), args=args, keywords=[])
    for part in (call, call.func, *args[1:]):
        ast.copy_location(part, value)
    node.value = call


def _rewrite_private(node: ast.Attribute) -> None:
    """``x._name`` as ``$private(x, "_name").value``, decided when it runs (see _Private):
    the script's own objects have such attributes. In place, so it works wherever the
    attribute stands (read, assigned, deleted, a for or with target)."""
    _wrap_value(node, _PRIVATE, node.attr)
    node.attr = "value"


_CHECKED = frozenset(
    {
        ast.MatchClass,
        ast.ImportFrom,
        ast.alias,
        ast.ExceptHandler,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.AnnAssign,
        ast.Global,
        ast.Nonlocal,
        ast.MatchAs,
        ast.MatchStar,
    }
)


def _check_other(node: Any) -> None:
    if isinstance(node, ast.MatchClass):
        for attr in node.kwd_attrs:
            why = _refused_attribute(attr)
            if why is not None:
                raise Refused(node.lineno, why)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            raise Refused(node.lineno, "relative imports are not available in scripts")
    elif isinstance(node, ast.alias):
        _check_name(node, node.name)
        _check_name(node, node.asname)
    elif isinstance(node, ast.ExceptHandler):
        _check_name(node, node.name)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # A method may be named __init__ or __eq__: defining one reaches nothing.
        _check_annotation(node.returns)
    elif isinstance(node, ast.AnnAssign):
        _check_annotation(node.annotation)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        for name in node.names:
            _check_name(node, name)
    elif isinstance(node, (ast.MatchAs, ast.MatchStar)):
        _check_name(node, node.name)


def compile_script(
    code: str,
) -> tuple[types.CodeType, list[int], tuple[int, str] | None, list[tuple[int, str]]]:
    """The script's code as the body of ``async def``, checked; lines are the script's own.
    With it, the lines of its top-level ``if __name__ == "__main__":`` blocks, which never
    run (a script is no program run as ``__main__``), and the line and text of its last
    statement when that is a bare name, attribute or subscript (``result``: a notebook's
    answer, whose value in a script goes nowhere), a call of a function of the script's that
    returns a value (``await main()``: a program's) or an assignment of one name (``summary =
    {...}``): its line and what its warning says, else None. Last, the SyntaxWarnings its
    compiling gave (``if x is 1:``), each its line and text, which CPython prints before a
    program runs.

    Raises SyntaxError (with ``lineno``) or :class:`Refused`.
    """
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", SyntaxWarning)
        tree = ast.parse(code, filename=FILENAME, mode="exec")
    check(tree, rewrite=True)
    if "match" in code:  # a walk of the whole tree, for scripts that can have one
        _MatchRewriter().visit(tree)
    _check_globals(tree)
    if "def" in code:  # a walk of the whole tree, for scripts that define a function
        _unevaluated_signatures(tree)
    flags = _future_flags(tree)
    if flags & _ANNOTATIONS:
        flags &= ~_ANNOTATIONS
        _unevaluated_class_annotations(tree)
    guards = [node.lineno for node in tree.body if _is_main_guard(node)]
    bare = None
    if tree.body and isinstance(final := tree.body[-1], ast.Expr):
        value = final.value
        called = _calls_own(tree, value)
        if isinstance(value, ast.Name | ast.Attribute | ast.Subscript) or called is not None:
            text = ast.get_source_segment(code, value)
            if text is not None and "\n" not in text and len(text) <= 120:
                # A coroutine function's call not awaited is returned awaited; a function of
                # the script's named alone (`main`) is returned called.
                fix = "await " + text if called == "async" else text
                named = value.id if isinstance(value, ast.Name) else None
                for node in tree.body:
                    defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    if defines and node.name == named:  # type: ignore[attr-defined]
                        awaited = "await " if isinstance(node, ast.AsyncFunctionDef) else ""
                        fix = f"{awaited}{text}()"
                bare = (final.lineno, bare_ending(text, fix))
    elif tree.body and (name := _assigned(tree.body[-1])) is not None:
        bare = (tree.body[-1].lineno, assigned_ending(name))
    empty = ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
    )
    last = code.count("\n") + 1
    main = ast.AsyncFunctionDef(
        name=_MAIN,
        args=empty,
        body=tree.body or [ast.Pass(lineno=1, col_offset=0, end_lineno=1, end_col_offset=0)],
        decorator_list=[],
        returns=None,
        type_comment=None,
        lineno=1,
        col_offset=0,
        end_lineno=last,
        end_col_offset=0,
    )
    module = ast.Module(body=[main], type_ignores=[])
    with warnings.catch_warnings(record=True) as more:
        warnings.simplefilter("always", SyntaxWarning)
        compiled = compile(module, FILENAME, "exec", flags=flags, dont_inherit=True)
    syntax = [
        (w.lineno, str(w.message))
        for w in [*said, *more]
        if issubclass(w.category, SyntaxWarning) and w.filename == FILENAME
    ]
    for const in compiled.co_consts:
        if isinstance(const, types.CodeType) and const.co_flags & 0x200:  # CO_ASYNC_GENERATOR
            line = next((n.lineno for n in ast.walk(tree) if isinstance(n, ast.Yield)), 1)
            raise SyntaxError("'yield' at the top level of a script", (FILENAME, line, 0, ""))
    top = compiled.replace(co_consts=tuple(_top_level(c) for c in compiled.co_consts))
    return top, guards, bare, syntax


def _assigned(statement: ast.stmt) -> str | None:
    """The name a last statement gives a value to (``summary = {...}``, ``total: int = 0``),
    when it gives one name a value that is no function (``main = lambda: ...`` is not an
    answer left over)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target, value = statement.targets[0], statement.value
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        target, value = statement.target, statement.value
    else:
        return None
    if not isinstance(target, ast.Name) or isinstance(value, ast.Lambda):
        return None
    return target.id


def _calls_own(tree: ast.Module, value: ast.expr) -> str | None:
    """``"async"`` when ``value`` calls a coroutine function without awaiting it, ``"call"``
    for any other call (or awaited call) of a function the script defines at its top level
    that returns a value, else None: ``await main()`` or ``main()`` as the last line, a
    program's habit, drops what the function gives."""
    awaited = isinstance(value, ast.Await)
    if isinstance(value, ast.Await):
        value = value.value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)):
        return None
    name = value.func.id
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(node)):
                return None
            return "async" if isinstance(node, ast.AsyncFunctionDef) and not awaited else "call"
    return None


# `asyncio.run(main())` on a line, and the function it runs (`tools.name` too).
_ASYNCIO_RUN = re.compile(r"\basyncio\.run\(\s*(?:([A-Za-z_][\w.]{0,99})\s*\()?")


# 3.12's type parameters and type statement at a line's start, and how 3.11 writes each.
_TYPE_PARAMETERS = (
    (
        re.compile(r"\s*(?:async\s+)?def\s+\w+\s*\["),
        'def f[T]: write T = TypeVar("T") (from typing) before the function, and def f(x: T)',
    ),
    (
        re.compile(r"\s*class\s+\w+\s*\["),
        'class C[T]: write T = TypeVar("T") (from typing) before the class, and class '
        "C(Generic[T])",
    ),
    (
        re.compile(r"\s*type\s+\w+\s*[\[=]"),
        "type statement: write the alias as an assignment, X = list[int]",
    ),
)


# A template string's prefix (t, with r in either order and case) before its quote, as a
# word of its own: `t"..."`, `rt'...'`, not `print"` nor a name that ends in t.
_TEMPLATE_STRING = re.compile(r"""(?<![\w'"])(?:[tT][rR]?|[rR][tT])["']""")
# `except A, B:` with no `as`: its star and its types.
_BARE_EXCEPT = re.compile(r"\s*except(\*?)\s*([\w.]+(?:\s*,\s*[\w.]+)+)\s*:")


# JavaScript's operators Python has not, in a line: how each is found, written, and Python's.
_JAVASCRIPT_OPERATORS = tuple(
    (re.compile(pattern).search, javascript, python)
    for pattern, javascript, python in (
        (r"\w\s*\+\+", "x++", "x += 1"),
        (r"\w\s*--\s*(?:$|[;)])", "x--", "x -= 1"),
        (r"&&", "&&", "and"),
        (r"\|\|", "||", "or"),
        (r"===", "===", "=="),
        (r"!==", "!==", "!="),
        (r"(?:^|[\s(])!(?=[\w(])", "!x", "not x"),
        (r"(?:\w|\))\s*=>", "x => ...", "lambda x: ..."),
    )
)


# The Python that runs scripts, as its messages name it (a module global, so tests set it).
_VERSION = sys.version_info[:2]


def _syntax_hint(message: str, text: str) -> str:
    """What to add to a SyntaxError's text at line ``text`` in a script run by Python
    ``_VERSION`` (this one's): the Python that reads the script, when what fails is syntax a
    newer Python takes (3.12's f-strings, ``type X = ...`` and ``def f[T]``, 3.14's ``except
    A, B:`` and ``t"..."``), and how that Python writes it; what the script's terms make of
    an error in any Python; else ""."""
    # Only the hints of a newer Python's syntax depend on the version: the others hold in
    # every one (a host on 3.12 lost them all when this returned early there).
    version = _VERSION
    release = f"{version[0]}.{version[1]}"
    if version < (3, 12) and message.startswith(("invalid syntax", "expected '('")):
        for pattern, instead in _TYPE_PARAMETERS:
            if pattern.match(text):
                return f" (scripts are Python {release}, which has no {instead})"
    # Only these say what 3.12 allows: the f-string's own quote inside its braces ends it
    # early (an unmatched bracket, no '}'), or a backslash, '#' or deep nesting there. The
    # others (a bad conversion, an empty expression) are errors in any Python.
    if version < (3, 12) and message.startswith(("f-string: unmatched", "f-string: expecting '}'")):
        return (
            f"; scripts are Python {release}, where what is inside an f-string's braces "
            "cannot use the f-string's own quote: write f'{d[\"key\"]}' or take the value "
            "out first"
        )
    if version < (3, 12) and message.startswith(
        ("f-string expression part cannot include", "f-string: expressions nested too deeply")
    ):
        return (
            f"; scripts are Python {release}, which does not allow it (3.12 does): take the "
            "value out of the f-string first"
        )
    # What holds in any Python, said in a script's terms: its top level is the body of an
    # async function, so `import *` is refused there and `await` in a `def` is no top
    # level's.
    if message.startswith("import * only allowed at module level"):
        return (
            ": a script is the body of an async function, where Python refuses it: import the "
            "names the script uses, `from math import sqrt, pi`, or the module, `import math`"
        )
    if message.startswith(
        ("'await' outside async function", "asynchronous comprehension outside of an")
    ):
        return (
            "; the function it is in is not async (a plain `def`, or a lambda): make it an "
            "`async def`, and `await` its calls (`await f(...)`)"
        )
    if message.startswith("'break', 'continue' and 'return' cannot appear in an except* block"):
        return (
            "; keep what the block found in a name (`failed = True`), and return or leave "
            "the loop after the try"
        )
    if message.startswith("invalid syntax") and (
        used := [f"`{py}` for `{js}`" for found, js, py in _JAVASCRIPT_OPERATORS if found(text)]
    ):
        # `x++`, `a && b`, `!done`: a line of Python with JavaScript's operators (a whole
        # script in JavaScript is said so by the engine, which knows both).
        return f"; Python writes {', '.join(used)}"
    # What 3.14 takes: `except A, B:` (PEP 758) and template strings, t"..." (PEP 750).
    # Any other "invalid syntax" is one in every Python, and naming the version there sent
    # the reader looking for a newer feature the code does not use.
    if version < (3, 14) and message.startswith("multiple exception types must be parenthesized"):
        bare = _BARE_EXCEPT.match(text)
        if bare is None:  # with `as`, which 3.14 refuses too
            return ""
        return (
            f"; scripts are Python {release}, which does not allow it (3.14 does): write "
            f"except{bare[1]} ({bare[2]}):"
        )
    if version < (3, 14) and message.startswith("invalid syntax") and _TEMPLATE_STRING.search(text):
        return (
            f' (scripts are Python {release}, which has no template strings, t"..." (3.14 '
            'has): write an f-string, f"...")'
        )
    return ""


class _MatchRewriter(ast.NodeTransformer):
    """Each class pattern with positional sub-patterns, ``case A(x, y)``, as ``case
    $match0.cls(x, y)``, ``$match0 = $match(lambda: A, 2)`` made just before its ``match``.
    Python reads such a sub-pattern as the attribute the class's ``__match_args__`` names,
    in C, whatever the name: a class a script makes (with a metaclass whose
    ``__instancecheck__`` takes anything) could name ``__globals__``. ``.cls`` is read when
    Python tries the case, as ``A`` would be, and is a class whose ``__match_args__`` are
    ``A``'s, checked (see _match_class)."""

    def __init__(self) -> None:
        self.made = 0

    def visit_Match(self, node: ast.Match) -> list[ast.stmt]:
        self.generic_visit(node)
        before: list[ast.stmt] = []
        for case in node.cases:
            for pattern in ast.walk(case.pattern):
                if not isinstance(pattern, ast.MatchClass) or not pattern.patterns:
                    continue
                name = f"{_MATCH}{self.made}"
                self.made += 1
                get = ast.Lambda(args=_NO_ARGUMENTS, body=pattern.cls)
                call = ast.Call(
                    func=ast.Name(id=_MATCH, ctx=ast.Load()),
                    args=[get, ast.Constant(len(pattern.patterns))],
                    keywords=[],
                )
                assign = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=call)
                before.append(ast.fix_missing_locations(ast.copy_location(assign, node)))
                cls = ast.Attribute(value=ast.Name(id=name, ctx=ast.Load()), attr="cls")
                cls.ctx = ast.Load()
                pattern.cls = ast.fix_missing_locations(ast.copy_location(cls, pattern.cls))
        return [*before, node]


_NO_ARGUMENTS = ast.arguments(
    posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
)


def _unevaluated_signatures(tree: ast.Module) -> None:
    """Make each function's annotations of its arguments and result their text, as under
    ``from __future__ import annotations``, so that ``def`` never evaluates them: a model
    annotates its helpers with the declarations' types (``u: Get_user_User``), which the
    type check knows and a script has not (a NameError where ``def`` ran). Nothing a script
    has reads them (``typing.get_type_hints`` and ``singledispatch`` are left out). A class
    body's annotations, which ``dataclasses`` reads, are left as they are."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None and arg.annotation is not None:
                arg.annotation = _as_text(arg.annotation)
        if node.returns is not None:
            node.returns = _as_text(node.returns)


_ANNOTATIONS = __future__.annotations.compiler_flag
# What dataclasses reads from a field's annotation (an object: it finds it in a string only
# in the module's globals, and a script's imports are its function's names).
_DATACLASS_MARKS = frozenset({"ClassVar", "InitVar", "KW_ONLY"})


def _unevaluated_class_annotations(tree: ast.Module) -> None:
    """``from __future__ import annotations`` for a class body's annotations, done here:
    each is its text but for a ``ClassVar``, ``InitVar`` or ``KW_ONLY`` one (as
    ``typing.ClassVar[int]``), which stays the object dataclasses tests for. Made text by
    the compiler, a dataclass's ``ClassVar`` field became a field, and ``_: KW_ONLY`` one
    too."""

    def head(annotation: ast.expr) -> str | None:
        while isinstance(annotation, ast.Subscript):
            annotation = annotation.value
        if isinstance(annotation, ast.Attribute):
            return annotation.attr
        return annotation.id if isinstance(annotation, ast.Name) else None

    def body(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, ast.AnnAssign):
                if head(statement.annotation) not in _DATACLASS_MARKS:
                    statement.annotation = _as_text(statement.annotation)
            elif not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    for inner in getattr(statement, field, ()):
                        body(inner.body if not isinstance(inner, ast.stmt) else [inner])

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            body(node.body)


def _as_text(annotation: ast.expr) -> ast.expr:
    """``annotation`` as the text the compiler makes of it under ``from __future__ import
    annotations``."""
    return ast.copy_location(ast.Constant(ast.unparse(annotation)), annotation)


def _future_flags(tree: ast.Module) -> int:
    """Take the script's leading ``from __future__ import ...`` out of its body (in a
    function they are a SyntaxError, and models begin files with them) and return the
    compiler flags they stand for: the script runs as a module that has them would. One
    later in the script is left for the compiler to refuse, as CPython does; an unknown
    feature is refused as CPython refuses it."""
    flags = 0
    body = tree.body
    start = 0 if ast.get_docstring(tree, clean=False) is None else 1
    end = start
    while end < len(body) and isinstance(node := body[end], ast.ImportFrom):
        if node.module != "__future__" or node.level:
            break
        for alias in node.names:
            feature = getattr(__future__, alias.name, None)
            if alias.name not in __future__.all_feature_names or feature is None:
                raise SyntaxError(
                    f"future feature {alias.name} is not defined",
                    (FILENAME, node.lineno, node.col_offset + 1, ""),
                )
            flags |= feature.compiler_flag
        end += 1
    del body[start:end]
    return flags


def _defines_only(node: ast.stmt) -> bool:
    """Whether the top-level statement ``node`` runs none of the script's work: a function or
    class defined, an import, a docstring, a value given a name without a call."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return True
    if isinstance(node, ast.Import | ast.ImportFrom | ast.Pass):
        return True
    if isinstance(node, ast.Expr | ast.Assign | ast.AnnAssign):
        return not any(isinstance(n, ast.Call | ast.Await) for n in ast.walk(node))
    return False


# A tool written as an attribute on a line (`tools.class`, `tools.2fa_verify`).
_TOOL_ATTRIBUTE = re.compile(r"\btools\s*\.\s*(\w+)")
_MAIN_GUARD_NEVER_RUNS = (
    'the block of `if __name__ == "__main__":` never runs: a script is the body of an async '
    "function, not a program, so call what it calls directly (as `return await main()`)"
)


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(test := node.test, ast.Compare):
        return False
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and any(
        isinstance(x, ast.Constant) and x.value == "__main__" for x in sides
    )


_PREFIX = f"{_MAIN}.<locals>."


def _top_level(code: Any) -> Any:
    """``code`` with the qualified names of what it defines as a module's would be: the
    script's own ``class A`` is ``A``, not ``script.<locals>.A``, in its reprs (a
    dataclass's, ``<class 'A'>``), as when CPython runs the script as a module."""
    if not isinstance(code, types.CodeType):
        return code
    consts = tuple(_top_level(c) for c in code.co_consts)
    name = code.co_qualname
    if name.startswith(_PREFIX):
        short = name[len(_PREFIX) :]
        if not code.co_flags & inspect.CO_OPTIMIZED:  # a class body: it sets __qualname__
            consts = tuple(short if c == name and type(c) is str else c for c in consts)
        return code.replace(co_consts=consts, co_qualname=short)
    return code.replace(co_consts=consts)


# ---- dataclasses ----

# What dataclasses' own source for a class's methods names that a script may not.
_DATACLASS_NAMES = frozenset({"__dataclass_builtins_object__", "__dataclass_self__"})
_DATACLASS_ATTRIBUTES = frozenset({"__class__", "__setattr__", "__delattr__", "__post_init__"})


def _scripts_code_on_stack() -> bool:
    """True when a script's code called this (when its run is over too: a finalizer)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == FILENAME:
            return True
        frame = frame.f_back
    return False


def _dataclass_exec(source: str, globals: Any = None, locals: Any = None) -> None:
    """``exec`` as ``dataclasses`` sees it: the methods of a script's dataclass are source
    text made of its field names, which a script chooses freely (``type("X", (), {
    "__annotations__": {"a,evil()": int}})``), then run with the real builtins. When a
    script's code makes the class (its finalizers too, after its run), that text passes the
    script's own check (but for the names dataclasses' templates use) and runs with the
    script's builtins."""
    if not _scripts_code_on_stack():
        exec(source, globals, locals)
        return
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        raise TypeError("a dataclass's field names must be Python identifiers") from None
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    try:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                if node.attr in _DATACLASS_ATTRIBUTES and isinstance(node.ctx, ast.Load):
                    continue
                why = _refused_attribute(node.attr)
                if why is not None and _private_name(node.attr):
                    _rewrite_private(node)  # a field named `_x`: the script's own object's
                    continue
                if why is not None:
                    raise Refused(node.lineno, why)
            elif isinstance(node, ast.Name | ast.arg):
                name = node.id if isinstance(node, ast.Name) else node.arg
                if name not in _DATACLASS_NAMES and name not in defined:
                    _check_name(node, name)
            elif type(node) in _CHECKED:
                _check_other(node)
    except Refused as e:
        raise TypeError(f"a dataclass of a script cannot use {e.message}") from None
    scope = {"__builtins__": dict(_BUILTINS), _PRIVATE: _Private}
    exec(compile(tree, "<dataclass>", "exec"), scope, locals)


# What this module gives a module's own code in place of a builtin (its global shadows the
# builtin), by the module's name: never one of the names a script reads of it (_public).
_SHADOWS: set[tuple[str, str]] = set()


def _shadow(module: types.ModuleType, name: str, value: Any) -> None:
    """Give ``module``'s code ``value`` where it calls the builtin ``name``."""
    setattr(module, name, value)
    _SHADOWS.add((module.__name__, name))


_shadow(dataclasses, "exec", _dataclass_exec)


# What dataclasses reads by a name of its own: every other name it reads is a field's.
_DATACLASS_READS = frozenset({"__dataclass_fields__", "__dataclass_params__", "__set_name__"})


def _dataclass_attribute(obj: Any, name: Any) -> Any:
    """``name`` as the exact text a field's name holds, when a script's code may use that
    attribute of ``obj``; else raises ``TypeError`` saying why."""
    name = _exact(name)
    if isinstance(name, str) and name not in _DATACLASS_READS:
        why = _refused_attribute(name, obj)
        if why is not None and _scripts_code_on_stack():
            raise TypeError(f"a dataclass of a script cannot use {why}")
    return name


def _dataclass_getattr(obj: Any, name: Any, *default: Any) -> Any:
    """``getattr`` as ``dataclasses`` sees it. It reads a class's and an object's fields by
    their names (a default, ``asdict``, ``astuple``, ``replace``, a copy), which a script
    chooses freely (``type("X", (), {"__annotations__": {"__getattribute__": int}})``, or a
    field's ``name`` set afterwards): read so, ``object.__getattribute__`` itself reached
    every attribute of everything. A script's field names pass its own getattr's check."""
    return getattr(obj, _dataclass_attribute(obj, name), *default)


def _dataclass_setstate(self: Any, state: Any) -> None:
    """A frozen dataclass with slots as a copy restores it, each field by its name checked
    as ``_dataclass_getattr`` checks it (a field renamed ``__class__`` changed the class)."""
    for field, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, _dataclass_attribute(self, field.name), value)


_shadow(dataclasses, "getattr", _dataclass_getattr)
# The function dataclasses gives such a class, by its global.
dataclasses._dataclass_setstate = _dataclass_setstate  # type: ignore[attr-defined]


# ---- safe replacements ----


# What a script reads as `x.format` is the safe formatter's (see check's rewrite), however
# it names it: getattr(x, "format"), operator.attrgetter, operator.methodcaller.
_FORMATTING = ("format", "format_map")


def _exact(name: Any) -> Any:
    """An attribute name as the exact text it holds: a script's ``str`` subclass may answer
    ``startswith`` or ``str()`` as it likes, and what reaches the attribute is the text."""
    return str.__str__(name) if isinstance(name, str) else name


def _safe_getattr(obj: Any, name: str, *default: Any) -> Any:
    name = _exact(name)
    if type(obj) is Tools and isinstance(name, str) and name in obj._run.tool_set:
        # `getattr(tools, "_2fa_verify")`: how a script calls a tool whose name it cannot
        # write as an attribute (a keyword, a leading underscore, the object's own `__init__`);
        # the tool, never an attribute of that name.
        return Tools.__getattr__(obj, name)
    if isinstance(name, str):
        why = _refused_attribute(name, obj)
        if why is not None:
            raise AttributeError(why)
        if name in _FORMATTING:
            obj = _format_view(obj)
        elif name in _CLOCK_READERS:
            obj = _clock_view(obj)
    return builtins.getattr(obj, name, *default)


def _safe_hasattr(obj: Any, name: str) -> bool:
    name = _exact(name)
    if type(obj) is Tools and isinstance(name, str) and name in obj._run.tool_set:
        return True  # as getattr above
    if isinstance(name, str) and _refused_attribute(name, obj) is not None:
        return False
    return builtins.hasattr(obj, name)


def _safe_setattr(obj: Any, name: str, value: Any) -> None:
    name = _exact(name)
    if isinstance(name, str):
        why = _refused_attribute(name, obj)
        if why is not None:
            raise AttributeError(why)
    builtins.setattr(obj, name, value)


def _safe_delattr(obj: Any, name: str) -> None:
    name = _exact(name)
    if isinstance(name, str):
        why = _refused_attribute(name, obj)
        if why is not None:
            raise AttributeError(why)
    builtins.delattr(obj, name)


def _copy_setattr(obj: Any, name: str, value: Any) -> None:
    """``setattr`` as ``copy`` sees it: it restores slots by name, the state a script's
    ``__reduce_ex__`` gives, onto any object its function returns (a task's private state:
    the scheduler then failed). Checked as the script's own when a script's code copies; a
    host that ran a script in its own process copies its objects as before."""
    if _scripts_code_on_stack():
        _safe_setattr(obj, name, value)
    else:
        builtins.setattr(obj, name, value)


_shadow(copy, "setattr", _copy_setattr)


class _SafeFormatter(string.Formatter):
    """``str.format`` whose fields refuse the attributes scripts may not use."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = _safe_getattr(obj, key) if is_attr else obj[key]
        return obj, first


_FORMATTER = _SafeFormatter()


class _FormatView(_Opaque):
    """What ``$format(x)`` gives for a string (or ``str``): ``format`` and ``format_map``
    through the safe formatter."""

    __slots__ = ("_text",)

    def __init__(self, text: str | None) -> None:
        self._text = text

    def format(self, *args: Any, **kwargs: Any) -> str:
        if self._text is None:  # str.format(text, ...)
            if not args or not isinstance(args[0], str):
                raise TypeError("str.format takes a string first")
            return _FORMATTER.format(*args, **kwargs)
        return _FORMATTER.format(self._text, *args, **kwargs)

    def format_map(self, *args: Any) -> str:
        if self._text is None:
            if len(args) != 2 or not isinstance(args[0], str):
                raise TypeError("str.format_map takes a string and a mapping")
            return _FORMATTER.vformat(args[0], (), args[1])
        if len(args) != 1:
            raise TypeError("format_map takes one mapping")
        return _FORMATTER.vformat(self._text, (), args[0])


# The run's date and datetime classes, whose clock is the script's (set by _clock_modules:
# a process runs one script).
_CLOCK_CLASSES: dict[str, type] = {}


def _clock_view(obj: Any) -> Any:
    """``x`` in ``x.now`` (``today``, ``fromtimestamp``, ...): the run's own ``datetime`` or
    ``date`` class for the real ones, or for an object of theirs. The real classes are
    within a script's reach (``type(datetime.datetime.min)``, ``type(d.date())``), and
    their clock is the host's: a live run and its replay would differ."""
    safe_datetime, safe_date = _CLOCK_CLASSES.get("datetime"), _CLOCK_CLASSES.get("date")
    if safe_datetime is None or safe_date is None:
        return obj
    if type(obj) is super:
        # super(D, D).now of a script's subclass of the real class: that class's own
        kind = _SUPER_SELF_CLASS.__get__(obj)
        if kind is None or not issubclass(kind, _datetime.date):
            return obj
        return safe_datetime if issubclass(kind, _datetime.datetime) else safe_date
    kind = obj if isinstance(obj, type) else type(obj)
    if issubclass(kind, _datetime.datetime):
        return obj if issubclass(kind, safe_datetime) else safe_datetime
    if issubclass(kind, _datetime.date):
        return obj if issubclass(kind, safe_date) else safe_date
    return obj


def _format_view(obj: Any) -> Any:
    """``x`` in ``x.format``: a string's safe view, or ``x`` itself for anything else."""
    if type(obj) is super:
        # super().format in a method of a script's str subclass: str's own, on its text
        kind = _SUPER_SELF_CLASS.__get__(obj)
        if kind is None or not issubclass(kind, str):
            return obj
        itself = _SUPER_SELF.__get__(obj)
        return _FormatView(str.__str__(itself) if isinstance(itself, str) else None)
    if isinstance(obj, str):
        return _FormatView(obj)
    if isinstance(obj, type) and issubclass(obj, str):
        return _FormatView(None)
    return obj


class _MatchTarget(type):
    """The class a rewritten class pattern matches against (see _MatchRewriter): an object
    is one of it when it is one of the script's class; its ``__match_args__`` are that
    class's, checked."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return builtins.isinstance(obj, cls.__dict__["target"])


# Each pattern class made, by the class it stands for and its checked __match_args__. A
# process runs one script: these are its few.
_MATCH_CLASSES: dict[tuple[int, tuple[str, ...]], tuple[type, type]] = {}


class _MatchClass(_Opaque):
    """``$match(lambda: A, n)``: ``.cls`` is what a class pattern of ``n`` positional
    sub-patterns matches against, for ``A`` as it is when the case is tried."""

    __slots__ = ("_get", "_positional")

    def __init__(self, get: Callable[[], Any], positional: int) -> None:
        self._get = get
        self._positional = positional

    @property
    def cls(self) -> Any:
        target = self._get()
        if not isinstance(target, type):
            return target  # Python says a pattern's class must be a class
        found = builtins.getattr(target, "__match_args__", _NO_OBJECT)
        if found is _NO_OBJECT:
            return target  # Python reads no attribute (int(x) is the subject itself)
        name = _TYPE_NAME.__get__(target)
        if type(found) is not tuple:
            raise TypeError(f"{name}.__match_args__ must be a tuple (got {_type_name(found)})")
        names = found[: self._positional]
        for attribute in names:
            if type(attribute) is not str:
                raise TypeError(
                    f"__match_args__ elements must be strings (got {_type_name(attribute)})"
                )
            why = _refused_attribute(attribute)
            if why is not None:
                raise AttributeError(f"{name}.__match_args__ names {why}")
        made = _MATCH_CLASSES.get((id(target), names))
        if made is None or made[0] is not target:
            namespace = {"__match_args__": names, "__slots__": (), "target": target}
            made = target, _MatchTarget(name, (), namespace)
            _MATCH_CLASSES[(id(target), names)] = made
        return made[1]


class _Private(_Opaque):
    """A script's ``x._name``, which the check writes as ``$private(x, "_name").value``:
    read, set or deleted when ``x`` is the script's own (see _scripts_own), an
    AttributeError otherwise."""

    __slots__ = ("_name", "_obj")

    def __init__(self, obj: Any, name: str) -> None:
        why = _refused_attribute(name, obj)
        if why is not None:
            if type(obj) is Tools and name in obj._run.tool_set:
                why = unwritable_tool(name)  # `tools._2fa_verify`: meant as the tool
            raise AttributeError(why)
        self._obj = obj
        self._name = name

    @property
    def value(self) -> Any:
        return builtins.getattr(self._obj, self._name)

    @value.setter
    def value(self, value: Any) -> None:
        builtins.setattr(self._obj, self._name, value)

    @value.deleter
    def value(self) -> None:
        builtins.delattr(self._obj, self._name)


def _attrgetter(*names: str) -> Any:
    names = tuple(_exact(name) for name in names)
    paths = [str(name).split(".") for name in names]
    for path in paths:
        for part in path:
            why = _refused_attribute(part)
            if why is not None:
                raise AttributeError(why)

    # Never operator's own attrgetter: type() of one is its class, which takes any name.
    def get(path: list[str], obj: Any) -> Any:
        for part in path:
            obj = _safe_getattr(obj, part)
        return obj

    if len(paths) == 1:
        return functools.partial(get, paths[0])
    return lambda obj: tuple(get(path, obj) for path in paths)


def _methodcaller(name: str, *args: Any, **kwargs: Any) -> Any:
    name = _exact(name)
    why = _refused_attribute(str(name))
    if why is not None:
        raise AttributeError(why)
    # Never operator's own methodcaller: type() of one is its class, which takes any name.
    return lambda obj: _safe_getattr(obj, name)(*args, **kwargs)


def _update_wrapper(
    wrapper: Any,
    wrapped: Any,
    assigned: Any = functools.WRAPPER_ASSIGNMENTS,
    updated: Any = functools.WRAPPER_UPDATES,
) -> Any:
    """functools.update_wrapper, whose ``assigned`` and ``updated`` name attributes it reads
    and sets: the defaults, or names a script may use."""
    assigned, updated = tuple(assigned), tuple(updated)
    for name in (*assigned, *updated):
        name = _exact(name)
        if name in functools.WRAPPER_ASSIGNMENTS or name in functools.WRAPPER_UPDATES:
            continue
        why = _refused_attribute(name) if isinstance(name, str) else None
        if why is not None:
            raise AttributeError(why)
    return functools.update_wrapper(wrapper, wrapped, assigned, updated)


def _wraps(
    wrapped: Any,
    assigned: Any = functools.WRAPPER_ASSIGNMENTS,
    updated: Any = functools.WRAPPER_UPDATES,
) -> Any:
    """functools.wraps, through :func:`_update_wrapper`."""
    return functools.partial(_update_wrapper, wrapped=wrapped, assigned=assigned, updated=updated)


for _function, _real in ((_update_wrapper, functools.update_wrapper), (_wraps, functools.wraps)):
    _function.__doc__, _function.__name__ = _real.__doc__, _real.__name__
    _function.__qualname__, _function.__module__ = _real.__qualname__, "functools"


class _UserString(collections.UserString):
    """collections.UserString, whose format and format_map are the safe formatter's."""

    def format(self, /, *args: Any, **kwargs: Any) -> str:
        return _FORMATTER.vformat(self.data, args, kwargs)

    def format_map(self, mapping: Any) -> str:
        return _FORMATTER.vformat(self.data, (), mapping)


_UserString.__name__ = _UserString.__qualname__ = "UserString"
_UserString.__module__ = "collections"


# A module with at most these many names lists them when a script asks for another.
_FEW_NAMES = 10


class Module(_Opaque):
    """An allowed module as a script sees it: its public names only, read-only."""

    __slots__ = ("_hints", "_name", "_names")

    def __init__(
        self, name: str, names: dict[str, Any], hints: dict[str, str] | None = None
    ) -> None:
        _made_once(self, "_name")
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_names", names)
        # A name the module does not give a script: what to do instead (": ...").
        object.__setattr__(self, "_hints", hints or {})

    def __getattr__(self, key: str) -> Any:
        try:
            return self._names[key]
        except KeyError:
            if key == "__name__":  # as a module's (`from m import x` names m when x is not)
                return self._name
            near = closest_names(key, list(self._names))
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            if not near and (len(self._names) <= _FEW_NAMES or self._hints):
                # io, and asyncio (the part of it a script has): say what there is
                hint = f"; it has {', '.join(sorted(self._names))}"
            if type(key) is str and key in self._hints:
                hint = self._hints[key]
            elif (self._name, key) in _LEFT_OUT:  # as `from functools import ...` says it
                hint = _LEFT_OUT[self._name, key]
            where = "" if hint.startswith(": it is left out of scripts") else " in scripts"
            raise AttributeError(
                f"module {self._name!r} has no attribute {key!r}{where}{hint}"
            ) from None

    def __setattr__(self, key: str, value: Any) -> NoReturn:
        raise AttributeError(f"module {self._name!r} is read-only in scripts")

    def __delattr__(self, key: str) -> NoReturn:
        raise AttributeError(f"module {self._name!r} is read-only in scripts")

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<module {self._name!r}>"


def _public(module: types.ModuleType, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A module's public names, without the modules it holds, the builtins this module
    shadows in it (``dataclasses.exec`` ran checked code that read ``type.__setattr__``)
    and ``drop``."""
    names = {}
    for key in dir(module):
        if key.startswith("_") or key in drop or (module.__name__, key) in _SHADOWS:
            continue
        value = getattr(module, key)
        if isinstance(value, types.ModuleType):
            continue
        names[key] = value
    return names


# The run whose script code runs now, inside its fence (Run._fenced), if any.
_fenced_run: Run | None = None


class _Redirect(contextlib._RedirectStream[Any]):
    """contextlib's redirect_stdout and redirect_stderr (as CPython makes them), whose
    leaving restores the stream only within the run that made them: a dropped coroutine that
    the garbage collector closes after its run (its ``with`` left then) changes nothing of
    the process's."""

    _old_targets: list[Any]

    def __init__(self, new_target: Any) -> None:
        super().__init__(new_target)
        self._run = _fenced_run

    def __exit__(self, *exc: Any) -> None:
        if _fenced_run is not None and _fenced_run is self._run:
            super().__exit__(*exc)
        elif self._old_targets:
            self._old_targets.pop()


class _RedirectStdout(_Redirect):
    _stream = "stdout"


class _RedirectStderr(_Redirect):
    _stream = "stderr"


class _CatchWarnings(warnings.catch_warnings):
    """warnings.catch_warnings, whose leaving restores the warnings' state only within the
    run that made it (as :class:`_RedirectStdout`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._run = _fenced_run

    def __exit__(self, *exc: Any) -> None:
        if _fenced_run is not None and _fenced_run is self._run:
            super().__exit__(*exc)


def _named(kind: type, name: str, module: str) -> None:
    """Name a class scripts see as the module's own is named (in reprs and errors)."""
    kind.__name__ = kind.__qualname__ = name
    kind.__module__ = module


_named(_RedirectStdout, "redirect_stdout", "contextlib")
_named(_RedirectStderr, "redirect_stderr", "contextlib")
_named(_CatchWarnings, "catch_warnings", "warnings")


# ---- logging: each run's own loggers (Run._logging) ----


class _ScriptFormatter(logging.Formatter):
    """logging.Formatter as scripts have it: times in UTC, the script's clock's (a record's
    ``created`` is the script's clock); ``{``-style fields refuse the attributes scripts may
    not use (as ``str.format`` in a script does); an exception written with the script's
    frames only, as its ``traceback`` module writes it."""

    converter = _time.gmtime  # type: ignore[assignment]

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Any = "%",
        validate: bool = True,
        *,
        defaults: Any = None,
    ) -> None:
        super().__init__(fmt, datefmt, style, validate, defaults=defaults)
        if style == "{":
            self._style = _SafeBraceStyle(self._style._fmt, defaults=defaults)

    def formatException(self, ei: Any) -> str:
        error = ei[1] if isinstance(ei, tuple) and len(ei) == 3 else None
        run = _fenced_run
        if run is None or not isinstance(error, BaseException):
            return ""
        return "".join(run._traceback_lines(error, None, True, True)).rstrip("\n")

    def formatStack(self, stack_info: str) -> str:
        return stack_info


class _SafeBraceStyle(logging.StrFormatStyle):
    def _format(self, record: logging.LogRecord) -> str:
        defaults = self._defaults  # type: ignore[attr-defined]
        values = defaults | record.__dict__ if defaults else record.__dict__
        return _FORMATTER.vformat(self._fmt, (), values)


# What a handler formats with when it was given no formatter (logging's own default writes
# an exception with the sandbox's frames).
_DEFAULT_FORMATTER = _ScriptFormatter()


class _ScriptHandling:
    """What a script's handlers do their own way: format with :data:`_DEFAULT_FORMATTER`
    when given no formatter; say a record that failed (``logging.warning("%s", 1, 2)``)
    as CPython says it, with the script's line for its call stack and none of the
    sandbox's frames."""

    formatter: logging.Formatter | None

    def format(self, record: logging.LogRecord) -> str:
        return (self.formatter or _DEFAULT_FORMATTER).format(record)

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        run = _fenced_run
        if not logging.raiseExceptions or error is None or run is None:
            return
        try:
            lines = run.script_lines
            where = ""
            if record.pathname == FILENAME and 1 <= record.lineno <= len(lines):
                where = (
                    f'Call stack:\n  File "{FILENAME}", line {record.lineno}, in '
                    f"{record.funcName}\n    {lines[record.lineno - 1].strip()[:300]}\n"
                )
            sys.stderr.write(f"--- Logging error ---\n{_exception_line(error)}{where}")
            try:
                said = f"Message: {repr(record.msg)[:300]}\nArguments: {repr(record.args)[:300]}\n"
            except (MemoryError, _Ended):
                raise
            except Exception:
                # As CPython's: a message or argument that has no repr (the script's own
                # __repr__ that fails, an int past the digits Python writes). The line above
                # is said all the same: the record was lost without a word.
                said = "Unable to print the message and arguments - possible type mismatch?\n"
            sys.stderr.write(said)
        except (MemoryError, _Ended):
            raise
        except Exception:  # a script's stderr that fails: nothing more to say
            pass


class _ScriptHandler(_ScriptHandling, logging.Handler):
    pass


class _ScriptStreamHandler(_ScriptHandling, logging.StreamHandler):
    pass


class _LastResort(_ScriptHandler):
    """logging's last resort (a record of WARNING or above, no handler anywhere): its text
    to sys.stderr as it is when the record comes, the printed text while a script runs."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def _stamped(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` made at the script's clock, in the same process and thread on every run."""
    run = _fenced_run
    created = run.script.clock.now_ms / 1000 if run is not None else 0.0
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    record.relativeCreated = 0.0
    record.thread, record.threadName = 1, "MainThread"
    record.process, record.processName = 1, "MainProcess"
    return record


class _ScriptRecord(logging.LogRecord):
    """logging.LogRecord as a script makes one itself: stamped as its loggers' records are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _stamped(self)


class _ScriptLogger(logging.Logger):
    """A logger of a run's own tree: a record carries the script's clock, the script's line
    that logged it, and the same process and thread in every run (the real ones differ
    between a live run and its replay, which must print the same)."""

    def makeRecord(
        self,
        name: str,
        level: int,
        fn: str,
        lno: int,
        msg: object,
        args: Any,
        exc_info: Any,
        func: str | None = None,
        extra: Any = None,
        sinfo: str | None = None,
    ) -> logging.LogRecord:
        # Logger.makeRecord, the record a script's own (isinstance of its logging.LogRecord).
        record = _ScriptRecord(name, level, fn, lno, msg, args, exc_info, func, sinfo)
        if extra is not None:
            for key in extra:
                if key in ("message", "asctime") or key in record.__dict__:
                    raise KeyError(f"Attempt to overwrite {key!r} in LogRecord")
                record.__dict__[key] = extra[key]
        return record

    def findCaller(self, stack_info: bool = False, stacklevel: int = 1) -> Any:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == FILENAME:
                stacklevel -= 1
                if stacklevel <= 0:
                    run = _fenced_run
                    main = run is not None and frame.f_code is run.main_code
                    name = "<module>" if main else frame.f_code.co_name
                    return FILENAME, frame.f_lineno, name, None
            frame = frame.f_back  # type: ignore[assignment]
        return "(unknown file)", 0, "(unknown function)", None

    def callHandlers(self, record: logging.LogRecord) -> None:
        # Logger.callHandlers, with the run's last resort for logging's.
        logger: logging.Logger | None = self
        found = 0
        while logger is not None:
            for handler in logger.handlers:
                found += 1
                if record.levelno >= handler.level:
                    handler.handle(record)
            logger = logger.parent if logger.propagate else None
        if found == 0 and record.levelno >= _LAST_RESORT.level:
            _LAST_RESORT.handle(record)

    # Logger's __reduce__ gives logging.getLogger, the process's own tree's (a copy of the
    # run's root was the process's): a copy of a logger is the logger, as getLogger gives.
    def __copy__(self) -> _ScriptLogger:
        return self

    def __deepcopy__(self, memo: Any) -> _ScriptLogger:
        return self


class _ScriptRoot(_ScriptLogger, logging.RootLogger):
    pass


_LAST_RESORT = _LastResort(logging.WARNING)

_named(_ScriptFormatter, "Formatter", "logging")
_named(_ScriptHandler, "Handler", "logging")
_named(_ScriptStreamHandler, "StreamHandler", "logging")
_named(_ScriptLogger, "Logger", "logging")
_named(_ScriptRoot, "RootLogger", "logging")
_named(_ScriptRecord, "LogRecord", "logging")

_NO_FILES = (
    "; a script has no file system: its log goes to the printed text (logging.basicConfig("
    "level=logging.INFO) and a StreamHandler write there)"
)


def _listed(
    module: types.ModuleType, *names: str, drop: str | tuple[str, ...] = ()
) -> dict[str, Any]:
    """``names`` of ``module``, less ``drop``."""
    dropped = (drop,) if isinstance(drop, str) else drop
    return {name: getattr(module, name) for name in names if name not in dropped}


_ONE_LOCALE = "; a script has one locale (C, English names): use calendar.TextCalendar"
_BYTES_ONLY = (
    "; a script has no file system: gzip.compress(data) and gzip.decompress(data) work on "
    "bytes (read a file with `await files.text(id)` or `files.chunks(id)`)"
)
_TYPES_GIVEN = (
    "SimpleNamespace",
    "MappingProxyType",
    "FunctionType",
    "LambdaType",
    "MethodType",
    "BuiltinFunctionType",
    "BuiltinMethodType",
    "GeneratorType",
    "CoroutineType",
    "AsyncGeneratorType",
    "NoneType",
    "EllipsisType",
    "NotImplementedType",
    "GenericAlias",
    "UnionType",
)


def _shlex_split(s: str, comments: bool = False, posix: bool = True) -> list[str]:
    # CPython 3.11 reads sys.stdin for s=None (deprecated; 3.12 refuses it, as here).
    if s is None:
        raise ValueError("s argument must not be None")
    return shlex.split(s, comments, posix)


_shlex_split.__name__ = _shlex_split.__qualname__ = "split"
_shlex_split.__module__ = "shlex"
_shlex_split.__doc__ = shlex.split.__doc__


def _warn(message: Any, category: Any = None, stacklevel: Any = 1, source: Any = None) -> None:
    # The stack ends at the script's top level, as a program's at its module: a stacklevel
    # past it is past the stack (CPython's "sys", line 1), not a frame of the sandbox's,
    # whose file and line a live run and its replay do not share.
    level = operator.index(stacklevel)
    frame: types.FrameType | None = sys._getframe(1)
    depth = above = 0  # the script's outermost frame, counted from the caller as 1
    while frame is not None:
        above += 1
        if frame.f_code.co_filename == FILENAME:
            depth = above
        frame = frame.f_back
    warnings.warn(message, category, max(level, 1) + 1 if level <= depth else above + 2, source)


_warn.__name__ = _warn.__qualname__ = "warn"
_warn.__module__ = "warnings"
_warn.__doc__ = warnings.warn.__doc__


def _static_modules() -> dict[str, Module]:
    """The allowed modules that hold nothing of one run (built once, at import)."""
    plain = {
        "abc": abc,
        "array": array,
        "base64": base64,
        "binascii": binascii,
        "bisect": bisect,
        "cmath": cmath,
        "collections": collections,
        "copy": copy,
        "csv": csv,
        "dataclasses": dataclasses,
        "decimal": decimal,
        "difflib": difflib,
        "enum": enum,
        "fnmatch": fnmatch,
        "fractions": fractions,
        "functools": functools,
        "hashlib": hashlib,
        "heapq": heapq,
        "html": html,
        "ipaddress": ipaddress,
        "itertools": itertools,
        "json": json,
        "math": math,
        "numbers": numbers,
        "pprint": pprint,
        "re": re,
        "statistics": statistics,
        "struct": struct,
        "textwrap": textwrap,
        "unicodedata": unicodedata,
        "zlib": zlib,
    }
    modules = {name: Module(name, _public(module)) for name, module in plain.items()}
    # `hashlib.file_digest` reads a file object; scripts have none, but it reaches for fds.
    modules["hashlib"] = Module("hashlib", _public(hashlib, ("file_digest",)))
    modules["hmac"] = Module("hmac", _listed(hmac, "new", "digest", "compare_digest", "HMAC"))
    # What the module's own names hold, less what reaches the system: contextlib's chdir;
    # calendar's locale classes (they set the process's locale) and main (a command line).
    # redirect_stdout and the pr* functions of calendar write through sys.stdout, which is
    # the printed text while a script runs.
    scoped = {"redirect_stdout": _RedirectStdout, "redirect_stderr": _RedirectStderr}
    modules["contextlib"] = Module(
        "contextlib", {**_listed(contextlib, *contextlib.__all__, drop="chdir"), **scoped}
    )
    modules["calendar"] = Module(
        "calendar",
        _listed(
            calendar,
            *calendar.__all__,
            "error",
            "prweek",
            "week",
            "weekheader",
            drop=("LocaleTextCalendar", "LocaleHTMLCalendar"),
        ),
        {
            "different_locale": _ONE_LOCALE,
            "LocaleTextCalendar": _ONE_LOCALE,
            "LocaleHTMLCalendar": _ONE_LOCALE,
        },
    )
    # gzip's files are the file system's: bytes in memory only.
    modules["gzip"] = Module(
        "gzip",
        _listed(gzip, "compress", "decompress", "BadGzipFile"),
        dict.fromkeys(("open", "GzipFile"), _BYTES_ONLY),
    )
    # shlex's lexer class reads sys.stdin (the protocol's pipe) when given no text; its
    # functions are given text.
    modules["shlex"] = Module(
        "shlex",
        {"split": _shlex_split, "join": shlex.join, "quote": shlex.quote},
        {"shlex": "; split, join and quote are there: shlex.split(text)"},
    )
    # The types a script tests values against, and the two it makes: no constructor of code
    # or frames.
    modules["types"] = Module("types", _listed(types, *_TYPES_GIVEN))
    # Warnings go to the printed text, each once a run (see Run._fenced); the filters a
    # script sets last for its run. Not warn_explicit (it reads a module's loader) nor the
    # module's lists.
    modules["warnings"] = Module(
        "warnings",
        {
            **_listed(
                warnings,
                "simplefilter",
                "filterwarnings",
                "resetwarnings",
                "formatwarning",
                "WarningMessage",
            ),
            "catch_warnings": _CatchWarnings,
            "warn": _warn,
        },
    )
    # typing evaluates strings as code (get_type_hints, ForwardRef).
    modules["typing"] = Module(
        "typing",
        _public(typing, ("get_type_hints", "ForwardRef", "evaluate_forward_ref", "io", "re")),
    )
    # singledispatch's register evaluates a string annotation (a runtime value the check
    # never sees) through typing.get_type_hints.
    tools = _public(functools, ("singledispatch", "singledispatchmethod"))
    tools.update(update_wrapper=_update_wrapper, wraps=_wraps)
    modules["functools"] = Module("functools", tools)
    # global_enum writes an enum's members into the module its class names: any module's;
    # pickle_by_enum_name gives the builtin getattr (for pickle to call).
    modules["enum"] = Module(
        "enum", _public(enum, ("global_enum", "pickle_by_enum_name", "pickle_by_global_name"))
    )
    # UserString's format runs str's own on its text, whose fields read any attribute.
    containers = {**_public(collections), "UserString": _UserString}
    # The abstract classes typed code names (Iterable, Mapping, Sequence); `import
    # collections` gives them as its `abc`, as CPython's does once it is imported.
    modules["collections.abc"] = Module("collections.abc", _public(collections.abc))
    containers["abc"] = modules["collections.abc"]
    modules["collections"] = Module("collections", containers)
    operators = _public(operator)
    operators.update(attrgetter=_attrgetter, methodcaller=_methodcaller)
    modules["operator"] = Module("operator", operators)
    strings = _public(string)
    strings["Formatter"] = _SafeFormatter
    modules["string"] = Module("string", strings)
    modules["io"] = Module("io", {"StringIO": io.StringIO})
    # Pure text functions (quote, urlencode, urlsplit, parse_qs); urllib's other modules
    # reach the network, and `import urllib` gives this one only.
    modules["urllib.parse"] = Module("urllib.parse", _public(urllib.parse))
    modules["urllib"] = Module("urllib", {"parse": modules["urllib.parse"]})
    encoding = _public(json)
    encoding.update(JSONEncoder=_JSONEncoder, dumps=_json_dumps, dump=_json_dump, loads=_json_loads)
    modules["json"] = Module("json", encoding)
    return modules


class _JSONEncoder(json.JSONEncoder):
    """json's encoder as scripts have it: a call not awaited (``json.dumps(tools.x(...))``)
    is a TypeError that names the fix, not "Object of type _Call is not JSON serializable"."""

    def default(self, o: Any) -> Any:
        if issubclass(type(o), _Future):
            raise TypeError(o._misuse())
        return super().default(o)


_JSONEncoder.__name__ = _JSONEncoder.__qualname__ = "JSONEncoder"
_JSONEncoder.__module__ = "json"


def _json_dumps(obj: Any, *, cls: Any = None, **options: Any) -> str:
    return json.dumps(obj, cls=_JSONEncoder if cls is None else cls, **options)


def _json_dump(obj: Any, fp: Any, *, cls: Any = None, **options: Any) -> None:
    json.dump(obj, fp, cls=_JSONEncoder if cls is None else cls, **options)


def _json_loads(s: Any, **options: Any) -> Any:
    kind = type(s)
    if issubclass(kind, _Future):
        raise TypeError(s._misuse())
    if issubclass(kind, dict | list):  # json.loads of a tool's result
        raise TypeError(
            f"the JSON object must be str, bytes or bytearray, not {_type_name(s)}: a tool's "
            "result is already data, so use it as it is (json.dumps makes text of it)"
        )
    return json.loads(s, **options)


_json_dumps.__doc__, _json_dump.__doc__ = json.dumps.__doc__, json.dump.__doc__
_json_loads.__doc__ = json.loads.__doc__
_json_dumps.__name__ = _json_dumps.__qualname__ = "dumps"
_json_dump.__name__ = _json_dump.__qualname__ = "dump"
_json_loads.__name__ = _json_loads.__qualname__ = "loads"


_STATIC = _static_modules()

_BUILTIN_NAMES = [
    "abs",
    "all",
    "any",
    "ascii",
    "bin",
    "bool",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "complex",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "format",
    "frozenset",
    "hash",
    "hex",
    "id",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "object",
    "oct",
    "ord",
    "pow",
    "print",
    "property",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "zip",
    "aiter",
    "anext",
    "memoryview",
    "Ellipsis",
    "NotImplemented",
    "__build_class__",
]


def _base_builtins() -> dict[str, Any]:
    names = {name: getattr(builtins, name) for name in _BUILTIN_NAMES}
    for name in dir(builtins):
        value = getattr(builtins, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            names[name] = value
    names.update(
        super=_safe_super,
        getattr=_safe_getattr,
        hasattr=_safe_hasattr,
        setattr=_safe_setattr,
        delattr=_safe_delattr,
    )
    return names


_BUILTINS = _base_builtins()


# ---- object identity of one run ----

# An object's hash in a script, far from the small ints a set may hold beside it and from the
# futures' (_HASHED): a tie is compared with __eq__, which a future refuses.
_IDENTITY_HASHED = 1 << 59


class _Identities:
    """What stands in for an object's address in a script: numbers given in the order the
    script first asks for one (``id()``, the hash or the repr of an instance of its own
    class), so they are the same on every run of the script. An address is not: a script
    that passed ``str(obj)`` to a call, or looped over a set of its objects, asked for other
    calls on a replay than on the run the log recorded, and failed there as having diverged.

    A number is given up when its object dies (its address may then be another's); an object
    that takes no weak reference is kept to the run's end, so its number stays its own.

    The addresses CPython's own reprs write (``str(map(f, xs))``, a function's, ``object()``'s)
    cannot be numbered where they are made, so they are taken out of the text that leaves the
    run (:meth:`text`, :meth:`data`): printed text, a call's arguments, the returned value, the
    error. Not those the run was given (:meth:`given`): a tool's result, a file, the script;
    the run reads its calls' results for them (``read_given``) only when a text it sends
    holds an address, so a call whose arguments hold none costs one search of their text.

    What a script derives from such a text before it leaves (``str(m).split(" at ")[1]``),
    and the identity hash of an object not its own (``hash(len)``, the order of a set of
    functions), still differ from run to run: nothing here can find them.
    """

    __slots__ = ("_base", "_given", "_last", "_numbers", "read_given")

    def __init__(self) -> None:
        self._numbers: dict[int, tuple[Any, int]] = {}
        self._last = 0
        self._base: type | None = None
        # The addresses in what the run was given, which are the same on every run: a log a
        # tool returned, which the script passes on, keeps them.
        self._given: set[int] = set()
        # Called before a text that holds an address is changed: gives what the run has been
        # given since it was last called (the results of its calls).
        self.read_given: Callable[[], None] = lambda: None

    def given(self, text: str) -> None:
        """``text`` came from outside the run (a tool's answer, a file, the script): the
        addresses in it are its data, left in the text the run sends on."""
        if _addressed(text):
            self._given.update(int(found, 16) for found in _ADDRESS_END.findall(text))

    def given_data(self, data: Any) -> None:
        """:meth:`given` for each string and key of JSON ``data`` (a call's result)."""
        kind = type(data)
        if kind is str:
            self.given(data)
        elif kind is list:
            for item in data:
                self.given_data(item)
        elif kind is dict:
            for key, item in data.items():
                self.given(key)
                self.given_data(item)

    def unaddressed(self, found: re.Match[str]) -> str:
        """An address CPython's repr wrote (`` at 0x7f3a...>``, ``found``) left out (``<map
        object>``): never the address, which differs from run to run, nor the number id()
        gives the object there now. The text may be older than that object: another that
        had the address wrote it and died, and the address was reused (``s = str(f); del
        f``, then ``id(g)`` of a function made in its place gave ``s`` g's number), which
        nothing here can tell, and whether it is reused differs from run to run. One the run
        was given stays as it is."""
        if int(found[3], 16) in self._given:
            return found[0]
        return f"{found[1]}>"

    def text(self, text: str) -> str:
        """``text`` with the run's addresses taken out (see :meth:`unaddressed`)."""
        if not _addressed(text):
            return text
        self.read_given()
        return _ADDRESS.sub(self.unaddressed, text)

    def data(self, data: Any, root: str) -> Any:
        """JSON ``data`` (dicts, lists, strings, ...) with the run's addresses taken out of its
        strings and keys; raises TypeError when two keys of a dict would become one (keys that
        differ only in the addresses, ``{str(m): ... for m in maps}``), which would lose data
        the script meant to pass."""
        kind = type(data)
        if kind is str:
            return self.text(data)
        if kind is list:
            return [self.data(item, root) for item in data]
        if kind is not dict:
            return data
        out = {self.text(key): self.data(item, root) for key, item in data.items()}
        if len(out) < len(data):
            raise TypeError(
                f"{root} has keys that differ only in an object's address ('<... at 0x...>', "
                "as str() of a function or a map writes it), which differs from run to run and "
                "is left out of what a script sends, so they would be one key: key the data by "
                "something of the script's own (a name, a number)"
            )
        return out

    def number(self, obj: object) -> int:
        key = builtins.id(obj)
        known = self._numbers.get(key)
        if known is not None:
            return known[1]
        self._last += 1
        numbers = self._numbers
        try:
            held: Any = weakref.ref(obj, lambda _: numbers.pop(key, None))
        except TypeError:
            held = obj
        numbers[key] = (held, self._last)
        return self._last

    def builtins(self) -> dict[str, Any]:
        """The script's ``id`` and ``__build_class__``. A class of its own with no base (or
        ``object``) and no metaclass gets a base whose repr and hash use :meth:`number`.
        Only there, and as a base: a dataclass still writes its own repr (it writes none
        that its class defines), and a class that defines ``__eq__`` alone is still
        unhashable."""
        number = self.number

        def id(obj: object, /) -> int:
            return number(obj)

        def build_class(func: Any, name: Any, *bases: Any, **kwargs: Any) -> Any:
            if "metaclass" not in kwargs:
                if not bases or (len(bases) == 1 and bases[0] is object):
                    bases = (self._base or self._make_base(),)
                elif _unmarked_plain(bases):
                    # `class Repo(ABC)`, `class ApiError(Exception)`, `class Cache(Generic[T])`:
                    # the mark last, so the bases' own repr and hash come first (an
                    # exception's repr, a dict's refusal to be hashed).
                    bases = (*bases, self._base or self._make_base())
            return builtins.__build_class__(func, name, *bases, **kwargs)

        id.__qualname__ = "id"
        id.__doc__ = "The object's number in this script: the same on every run of it."
        return {"id": id, "__build_class__": build_class}

    def _make_base(self) -> type:
        number = self.number

        def __repr__(self: object) -> str:
            kind = type(self)
            return f"<{kind.__module__}.{kind.__qualname__} object at {number(self):#x}>"

        def __hash__(self: object) -> int:
            return _IDENTITY_HASHED + number(self)

        self._base = type(
            "ScriptObject",
            (_ScriptBase,),
            {"__slots__": (), "__repr__": __repr__, "__hash__": __hash__, "__module__": _MAIN},
        )
        return self._base


# ---- the clock, random numbers and uuid4 of one run ----


def _clock_modules(now_ms: int, seed: int) -> dict[str, Module]:
    now = now_ms / 1000
    now_ns = now_ms * 1_000_000
    utc = _datetime.UTC
    fixed = _datetime.datetime(1970, 1, 1, tzinfo=utc) + _datetime.timedelta(milliseconds=now_ms)

    def gmtime(secs: float | None = None) -> _time.struct_time:
        return _time.gmtime(now if secs is None else secs)

    def strftime(fmt: str, t: Any = None) -> str:
        return _time.strftime(fmt, gmtime() if t is None else t)

    def asctime(t: Any = None) -> str:
        return _time.asctime(gmtime() if t is None else t)

    def ctime(secs: float | None = None) -> str:
        return _time.asctime(gmtime(secs))

    def mktime(t: Any) -> float:
        return float(calendar.timegm(tuple(t)))

    def sleep(secs: float) -> None:
        """The clock stands still in a script; sleeping waits for nothing. The argument is
        checked as CPython checks it: a wrong one is the script's mistake all the same."""
        if not isinstance(secs, int | float):
            raise TypeError(f"'{type(secs).__name__}' object cannot be interpreted as an integer")
        if secs != secs:
            raise ValueError("Invalid value NaN (not a number)")
        if secs < 0:
            raise ValueError("sleep length must be non-negative")

    time_names: dict[str, Any] = {
        "time": lambda: now,
        "time_ns": lambda: now_ns,
        "monotonic": lambda: now,
        "monotonic_ns": lambda: now_ns,
        "perf_counter": lambda: now,
        "perf_counter_ns": lambda: now_ns,
        "process_time": lambda: 0.0,
        "process_time_ns": lambda: 0,
        "thread_time": lambda: 0.0,
        "thread_time_ns": lambda: 0,
        "sleep": sleep,
        "gmtime": gmtime,
        "localtime": gmtime,
        "mktime": mktime,
        "strftime": strftime,
        "strptime": _time.strptime,
        "asctime": asctime,
        "ctime": ctime,
        "struct_time": _time.struct_time,
        "timezone": 0,
        "altzone": 0,
        "daylight": 0,
        "tzname": ("UTC", "UTC"),
    }

    class date(_datetime.date):
        @classmethod
        def today(cls) -> Any:
            return cls(fixed.year, fixed.month, fixed.day)

        @classmethod
        def fromtimestamp(cls, t: float) -> Any:
            d = _datetime.datetime.fromtimestamp(t, utc)
            return cls(d.year, d.month, d.day)

    class datetime(_datetime.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            d = fixed if tz is None else fixed.astimezone(tz)
            return cls(
                d.year, d.month, d.day, d.hour, d.minute, d.second, d.microsecond,
                tzinfo=None if tz is None else d.tzinfo, fold=d.fold,
            )  # fmt: skip

        @classmethod
        def today(cls) -> Any:
            return cls.now()

        @classmethod
        def utcnow(cls) -> Any:
            return cls.now()

        @classmethod
        def fromtimestamp(cls, t: float, tz: Any = None) -> Any:
            d = _datetime.datetime.fromtimestamp(t, utc if tz is None else tz)
            return cls(
                d.year, d.month, d.day, d.hour, d.minute, d.second, d.microsecond,
                tzinfo=None if tz is None else d.tzinfo, fold=d.fold,
            )  # fmt: skip

        def astimezone(self, tz: Any = None) -> Any:
            base = self if self.tzinfo is not None else self.replace(tzinfo=utc)
            return _datetime.datetime.astimezone(base, utc if tz is None else tz)

        def timestamp(self) -> float:
            base = self if self.tzinfo is not None else self.replace(tzinfo=utc)
            return _datetime.datetime.timestamp(base)

    for cls in (date, datetime):
        cls.__module__ = "datetime"
    _CLOCK_CLASSES.update(date=date, datetime=datetime)
    datetime_names = _public(_datetime)
    datetime_names.update(date=date, datetime=datetime)

    class Random(_random.Random):
        """random.Random whose seed, when none is given, is the run's: the same each run."""

        def seed(self, a: Any = None, version: int = 2) -> None:
            super().seed(seed if a is None else a, version)

    Random.__module__ = "random"
    shared = Random(seed)
    random_names = {
        key: getattr(shared, key)
        for key in dir(_random.Random)
        if not key.startswith("_") and callable(getattr(shared, key))
    }
    random_names["Random"] = Random
    ids = Random(seed ^ 0x5DEECE66D)

    def uuid4() -> _uuid.UUID:
        return _uuid.UUID(int=ids.getrandbits(128), version=4)

    uuid_names = {
        "UUID": _uuid.UUID,
        "uuid3": _uuid.uuid3,
        "uuid4": uuid4,
        "uuid5": _uuid.uuid5,
        "SafeUUID": _uuid.SafeUUID,
        "NAMESPACE_DNS": _uuid.NAMESPACE_DNS,
        "NAMESPACE_URL": _uuid.NAMESPACE_URL,
        "NAMESPACE_OID": _uuid.NAMESPACE_OID,
        "NAMESPACE_X500": _uuid.NAMESPACE_X500,
    }
    return {
        "time": Module("time", time_names),
        "datetime": Module("datetime", datetime_names),
        "random": Module("random", random_names),
        "uuid": Module("uuid", uuid_names),
    }


# ---- the scheduler ----


class _Exited(BaseException):
    """From the scheduler to its loop: a task's ``sys.exit()`` ended the program."""


class _Future(_Opaque):
    """A value the script awaits: a tool call's result, a task's, gather's.

    ``what`` is how the script made it (``tools.price(...)``): a script that forgot to await
    it and uses it as its result (an item, an attribute, ``len``, ``if``, arithmetic, a
    comparison) gets a TypeError that names the fix, and its repr (what ``print`` shows)
    says the same. A future given ``failures`` (its run's) enters it when it fails and
    leaves it when its error is retrieved (awaited, or taken by gather, as asyncio's
    futures count it); what is left when the run ends is reported (see
    ``Run._unretrieved``). ``line`` is the script's line that made it (0: none).
    """

    __slots__ = (
        "_callbacks",
        "_done",
        "_error",
        "_failures",
        "_line",
        "_number",
        "_value",
        "_what",
    )

    def __init__(
        self,
        what: str = "an awaitable",
        failures: dict[_Future, None] | None = None,
        line: int = 0,
        number: int = 0,
    ) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[], None]] = []
        # Only what the sandbox made: a script may call __init__ again (it may name __init__,
        # for super()), and the sandbox formats these when it reports the future.
        self._what = what if type(what) is str else "an awaitable"
        self._failures = failures if type(failures) is dict else None
        self._line = line if type(line) is int else 0
        try:
            self._number  # noqa: B018 - the hash never changes: a set may hold the future
        except AttributeError:
            self._number: int = number if type(number) is int and number > 0 else 0

    def __hash__(self) -> int:
        # The run numbers the futures a script sees in the order it makes them, the same in
        # every process that runs it: a set of them (asyncio.wait's) iterates in the same
        # order live and replayed, which an identity hash (an address) would not. Far from
        # the small ints a dict may hold beside them (a tie would compare them, and comparing
        # a future with a value is refused).
        return _HASHED + self._number if self._number else object.__hash__(self)

    def _resolve(self, value: Any) -> None:
        if not self._done:
            self._done, self._value = True, value
            self._fire()

    def _reject(self, error: BaseException) -> None:
        if not self._done:
            self._done, self._error = True, error
            # A cancelled one is no failure to report (asyncio reports none either).
            if self._failures is not None and not issubclass(type(error), CancelledError):
                self._failures[self] = None
            self._fire()

    def _retrieve(self) -> BaseException | None:
        """The error, taken: a failure taken is not reported when the run ends."""
        if self._error is not None and self._failures is not None:
            self._failures.pop(self, None)
        return self._error

    def _fire(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def __await__(self) -> Any:
        # Awaiting suspends even a settled future, as JavaScript's await does: every task
        # that is ready runs before this one goes on, so the calls a replay makes come in
        # the same order whether their results were there at once or not.
        yield self
        while not self._done:
            yield self
        error = self._retrieve()
        if error is not None:
            raise error
        return self._value

    # ---- asyncio's Future and Task methods ----

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._done and issubclass(type(self._error), CancelledError)

    def result(self) -> Any:
        """The value; raises the error (taken), or InvalidStateError when not done yet."""
        if not self._done:
            raise InvalidStateError(f"{self._shown()} has no result yet: await it for its result")
        error = self._retrieve()
        if error is not None:
            raise error
        return self._value

    def exception(self) -> BaseException | None:
        """The error (taken) or None; raises CancelledError for a cancelled one, and
        InvalidStateError when not done yet."""
        if not self._done:
            raise InvalidStateError(f"{self._shown()} has no result yet: await it for its result")
        error = self._retrieve()
        if issubclass(type(error), CancelledError):
            raise error  # type: ignore[misc]
        return error

    def cancel(self, msg: Any = None) -> bool:
        """Done with a CancelledError, waking what awaits it; False when already done. A tool
        call's future is cancelled so: the call itself was made (the host runs it and its
        record stays in the log), the script just stops waiting for it."""
        if self._done:
            return False
        self._reject(CancelledError() if msg is None else CancelledError(msg))
        return True

    # ---- a future used as its result: a forgotten await ----

    def _shown(self) -> str:
        """How the script made it, as the script writes it."""
        return self._what

    def _misuse(self) -> str:
        shown = self._shown()
        return f'{shown} gives an awaitable, not its result: write "await {shown}"'

    def __repr__(self) -> str:
        return f"<{self._misuse()}>"

    def __format__(self, spec: str) -> str:
        if spec:  # f"{tools.price(...):.2f}"
            raise TypeError(self._misuse())
        return repr(self)

    def __getattr__(self, name: str) -> NoReturn:
        # Only for a name the future does not have. A dunder is a protocol probe (copy's,
        # a library's getattr(x, "__x__", None)): that stays an AttributeError.
        if name.startswith("_"):
            raise AttributeError(f"'{_type_name(self)}' object has no attribute {name!r}")
        if name in _FUTURE_METHODS:
            raise AttributeError(
                f"{self._shown()} has no attribute {name!r} in scripts; an awaitable has "
                "done(), result(), exception(), cancel() and cancelled(), and is awaited for "
                "its result"
            )
        raise TypeError(self._misuse())

    def __copy__(self) -> NoReturn:
        # `copy.deepcopy(tools.name(...))`: the result was meant, as in a comparison.
        raise TypeError(self._misuse())

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise TypeError(self._misuse())

    def __eq__(self, other: object) -> bool:
        # Futures compare by identity (`t in tasks`); comparing one with a value is a bug.
        if issubclass(type(other), _Future):
            return NotImplemented
        raise TypeError(self._misuse())

    def __iter__(self) -> _Unawaited:
        # Not the TypeError itself: str.join, list(), zip() and the like put their own words
        # ("can only join an iterable") in place of one that iter() raises, and pass one that
        # the iterator's __next__ raises through.
        return _Unawaited(self)


class _Unawaited(_Opaque):
    """What iterating a future gives (``for x in tools.list()``, ``", ".join(names)``): an
    iterator whose first ``next`` raises the future's TypeError, which names the await."""

    __slots__ = ("_future",)

    def __init__(self, future: _Future) -> None:
        _made_once(self, "_future")
        if not issubclass(type(future), _Future):
            raise TypeError(f"{_type_name(self)} takes an awaitable")
        self._future = future

    def __iter__(self) -> _Unawaited:
        return self

    def __next__(self) -> NoReturn:
        raise TypeError(self._future._misuse())

    def __repr__(self) -> str:
        return f"<{self._future._misuse()}>"

    def __hash__(self) -> int:
        # Its future's, the same on every run (an identity hash is an address).
        return hash(self._future)


_HASHED = 1 << 60

# asyncio's Future and Task methods a script's awaitables do not have (no event loop, no
# callbacks of the script's own): naming one is an AttributeError, not a forgotten await.
_FUTURE_METHODS = frozenset(
    (
        "add_done_callback", "remove_done_callback", "get_name", "set_name", "get_coro",
        "get_loop", "get_context", "get_stack", "print_stack", "set_result", "set_exception",
        "uncancel", "cancelling",
    )
)  # fmt: skip


def _not_a_value(self: _Future, *args: Any) -> NoReturn:
    raise TypeError(self._misuse())


# What a script does with a result and never with an awaitable. Not __call__ (callable()
# would be true) nor __next__ (an Iterator to collections.abc), so nothing that probes an
# object sees it as more than it is (__iter__ is the future's own: see _Unawaited);
# `__aiter__` is here for `async for x in tools.list()`, the context managers' for
# `async with tools.session() as s`.
_RESULT_ONLY = (
    "__bool__", "__len__", "__aiter__", "__enter__", "__exit__", "__aenter__",
    "__aexit__", "__contains__", "__getitem__",
    "__setitem__", "__delitem__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__",
    "__pos__", "__abs__", "__invert__", "__int__", "__float__", "__complex__", "__index__",
    "__round__", "__trunc__", "__floor__", "__ceil__",
    *(f"__{side}{op}__" for op in (
        "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "divmod", "pow",
        "lshift", "rshift", "and", "xor", "or",
    ) for side in ("", "r")),
)  # fmt: skip
for _name in _RESULT_ONLY:
    setattr(_Future, _name, _not_a_value)


class _Call(_Future):
    """A tool call's future; ``what`` is the tool's name (shown as the script calls it)."""

    __slots__ = ()

    def _shown(self) -> str:
        return _call_form(self._what)

    def __setattr__(self, name: str, value: Any) -> None:
        # `r.status = "done"` of a call not awaited, as a dict's or object's: said as reading
        # its attributes is (the sandbox's own are its slots, with an underscore).
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            raise TypeError(self._misuse())


def _call_form(name: str) -> str:
    """``tools.name(...)``, or ``getattr(tools, "name")(...)`` for a tool whose name a script
    cannot write as an attribute (a keyword, a refused prefix: see the stubs)."""
    if name.isidentifier() and not keyword.iskeyword(name) and _refused_attribute(name) is None:
        return f"tools.{name}(...)"
    return f'getattr(tools, "{name}")(...)'


class Task(_Future):
    """A coroutine the scheduler runs (``asyncio.create_task``, ``asyncio.gather``), on the
    run's ``ready`` queue. ``_waiting`` is the future it is suspended on (its wake-up is
    for that future only: a task cancelled meanwhile has moved on)."""

    __slots__ = ("_cancelling", "_coro", "_ready", "_throw", "_waiting")

    def __init__(
        self,
        coro: Any,
        what: str = "a task",
        failures: dict[_Future, None] | None = None,
        line: int = 0,
        number: int = 0,
        ready: deque[Task] | None = None,
    ) -> None:
        super().__init__(what, failures, line, number)
        self._coro = coro
        self._throw: BaseException | None = None
        self._waiting: _Future | None = None
        self._ready = ready if type(ready) is deque else None
        self._cancelling = False

    def cancel(self, msg: Any = None) -> bool:
        """As asyncio's: what the task awaits is cancelled (a task, a gather, a tool call's
        future), so a CancelledError is raised where the task waits; a task not waiting gets
        it when it next runs (a task not started never runs). False when already done."""
        if self._done or self._cancelling:
            return False  # (cancelling already: tasks that await each other in a ring)
        waiting = self._waiting
        self._cancelling = True
        try:
            if waiting is not None and waiting.cancel(msg):
                return True  # its wake-up (_wake) readies the task, which meets the error there
        finally:
            self._cancelling = False
        self._waiting = None
        self._throw = CancelledError() if msg is None else CancelledError(msg)
        if waiting is not None and self._ready is not None:
            self._ready.append(self)
        return True

    def _misuse(self) -> str:
        return f"{self._what} gives a task, not its result: await the task for its result"


def _wake(task: Task, future: _Future) -> None:
    """``future`` is done: ``task``, suspended on it, is ready again (if it still waits on it)."""
    if task._waiting is future:
        task._waiting = None
        if task._ready is not None:
            task._ready.append(task)


class _Gather(_Future):
    """``asyncio.gather``'s future: cancelling it cancels its children, as asyncio's does."""

    __slots__ = ("_children",)
    _children: list[_Future]

    def cancel(self, msg: Any = None) -> bool:
        if self._done:
            return False
        for child in getattr(self, "_children", ()):
            child.cancel(msg)
        return super().cancel(msg)


def _script_line() -> int:
    """The script's innermost line on the stack (0 if none): where a call or task is made."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == FILENAME:
            return frame.f_lineno
        frame = frame.f_back
    return 0


class _Yield(_Opaque):
    """``asyncio.sleep``: let every other ready task run once, then go on. One never awaited
    (nor made a task) warns as it goes, as a coroutine does."""

    __slots__ = ("_result", "_taken")

    def __init__(self, result: Any) -> None:
        self._result = result
        self._taken = False

    def __await__(self) -> Any:
        self._taken = True
        yield None
        return self._result

    def __del__(self) -> None:
        if not self._taken:
            # `asyncio.sleep(1)` for `await asyncio.sleep(1)` waited for nothing, and said
            # nothing of it: CPython's words, at the script's line that dropped it.
            warnings.warn("coroutine 'sleep' was never awaited", RuntimeWarning, stacklevel=2)

    # Under warnings.simplefilter("error"), what the warning is said to have been raised in
    # ("an exception in sleep was ignored"), as a coroutine's name is: not _Yield.__del__.
    __del__.__qualname__ = "sleep"

    def __repr__(self) -> str:
        return "<coroutine object sleep>"


def _closing_name(agen: Any) -> str:
    """The name a task closing ``agen`` goes by (``g.aclose()``)."""
    name = getattr(agen, "__qualname__", None)
    return f"{name[:100] if type(name) is str else 'an async generator'}.aclose()"


async def _await(awaitable: Any) -> Any:
    return await awaitable


@types.coroutine
def _going_on(started: Any, waits_on: Any) -> Any:
    """The rest of ``started``, an awaitable already begun that now waits on ``waits_on``,
    as an awaitable: what the task sends or throws goes on to it."""
    while True:
        try:
            sent = yield waits_on
        except BaseException as e:
            try:
                waits_on = started.throw(e)
            except StopIteration as done:
                return done.value
        else:
            try:
                waits_on = started.send(sent)
            except StopIteration as done:
                return done.value


class ToolError(Exception, metaclass=_Sealed):
    """A tool call that failed: ``str(e)`` is the tool's message, ``e.tool`` its name."""

    def __init__(self, message: str, tool: str) -> None:
        super().__init__(message)
        self.tool = tool


class LimitError(Exception, metaclass=_Sealed):
    """A call over a per-call limit (``call_arguments``): the message says which and why."""


class FileError(Exception, metaclass=_Sealed):
    """A ``files`` call that cannot be answered: a bad argument, or a file that is gone."""


# ---- asyncio for scripts: its errors, locks, events, queues and task groups ----
#
# On the run's scheduler, not an event loop; each works as asyncio's does (CPython 3.11), and
# each waiter is a future, woken in the order it came, so a script's calls come in the same
# order live and replayed. No time passes in a script: a timeout never fires.


class CancelledError(BaseException, metaclass=_Sealed):
    """asyncio's: raised where a cancelled task waits, and by awaiting a cancelled one."""


class InvalidStateError(Exception, metaclass=_Sealed):
    """asyncio's: the result of an awaitable that is not done yet."""


class QueueEmpty(Exception, metaclass=_Sealed):
    """asyncio's: ``get_nowait()`` of an empty queue."""


class QueueFull(Exception, metaclass=_Sealed):
    """asyncio's: ``put_nowait()`` on a full queue."""


async def _wait_in(
    line: deque[_Future], what: str, cancelled: Callable[[bool], None] | None = None
) -> None:
    """Wait at the end of ``line`` until woken (a waiter resolved by ``_wake_first``). The
    waiter stays in the line until its task goes on (so one that comes later sees it there),
    as asyncio's do. Cancelled meanwhile: ``cancelled(woken)`` runs, then CancelledError goes
    on (``woken``: it had been woken, and what it was given must be passed on)."""
    waiter = _Future(what)
    line.append(waiter)
    try:
        try:
            await waiter
        finally:
            line.remove(waiter)
    except CancelledError:
        if cancelled is not None:
            cancelled(not waiter.cancelled())
        raise


def _wake_first(line: deque[_Future]) -> bool:
    """Resolve the first waiter of ``line`` still waiting; False if there was none."""
    for waiter in line:
        if not waiter._done:
            waiter._resolve(True)
            return True
    return False


def _wake_next(line: deque[_Future]) -> None:
    """A queue's wake-up: the first waiter still waiting is taken out of ``line`` and
    resolved (the ones before it, cancelled, go too)."""
    while line:
        waiter = line.popleft()
        if not waiter._done:
            waiter._resolve(None)
            return


class _Held(_Opaque):
    """``async with`` for what is acquired and released (a semaphore, a lock)."""

    __slots__ = ()
    # Each kind's own (declared for the type check only).
    acquire: Callable[[], Awaitable[bool]]
    release: Callable[[], None]

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class Semaphore(_Held):
    """asyncio's: ``async with sem:`` lets at most ``value`` holders in at once, first come
    first served."""

    __slots__ = ("_bound", "_value", "_waiters")

    def __init__(self, value: int = 1) -> None:
        if type(value) is not int or value < 0:
            raise ValueError(f"Semaphore initial value must be an int >= 0, not {value!r}")
        self._value = value
        self._bound = -1  # BoundedSemaphore's
        self._waiters: deque[_Future] = deque()

    def __repr__(self) -> str:
        return f"<{_type_name(self)} value={self._value} waiters={len(self._waiters)}>"

    def locked(self) -> bool:
        return self._value == 0 or any(not w.cancelled() for w in self._waiters)

    async def acquire(self) -> bool:
        if not self.locked():
            self._value -= 1
            return True
        await _wait_in(self._waiters, f"{_type_name(self)}.acquire()", self._pass_on)
        if self._value > 0:
            self._wake_next()
        return True

    def release(self) -> None:
        if 0 <= self._bound <= self._value:
            raise ValueError("BoundedSemaphore released too many times")
        self._value += 1
        self._wake_next()

    def _pass_on(self, woken: bool) -> None:
        if woken:  # given the permit, then cancelled: the next waiter takes it
            self._value += 1
            self._wake_next()

    def _wake_next(self) -> None:
        # The permit goes to the first waiter now, so one that comes later cannot take it.
        if self._value > 0 and _wake_first(self._waiters):
            self._value -= 1


class BoundedSemaphore(Semaphore):
    """asyncio's: a Semaphore that refuses a release past its initial value."""

    __slots__ = ()

    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self._bound = value


class Lock(_Held):
    """asyncio's: ``async with lock:`` lets one holder in at a time, first come first served."""

    __slots__ = ("_locked", "_waiters")

    def __init__(self) -> None:
        self._locked = False
        self._waiters: deque[_Future] = deque()

    def __repr__(self) -> str:
        state = "locked" if self._locked else "unlocked"
        return f"<Lock [{state}, waiters:{len(self._waiters)}]>"

    def locked(self) -> bool:
        return self._locked

    async def acquire(self) -> bool:
        if not self._locked and all(w.cancelled() for w in self._waiters):
            self._locked = True
            return True
        await _wait_in(self._waiters, "Lock.acquire()", self._pass_on)
        self._locked = True
        return True

    def _pass_on(self, woken: bool) -> None:
        if not self._locked:  # cancelled in line: the next waiter may take the lock
            _wake_first(self._waiters)

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("Lock is not acquired.")
        self._locked = False
        _wake_first(self._waiters)


class Event(_Opaque):
    """asyncio's: ``await event.wait()`` until something calls ``event.set()``."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: deque[_Future] = deque()

    def __repr__(self) -> str:
        return f"<Event [{'set' if self._set else 'unset'}, waiters:{len(self._waiters)}]>"

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            for waiter in self._waiters:
                waiter._resolve(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        await _wait_in(self._waiters, "Event.wait()")
        return True


class Queue(_Opaque):
    """asyncio's: ``await q.put(x)`` and ``await q.get()`` (waiting while full or empty),
    their ``_nowait`` forms, and ``task_done()`` with ``await q.join()``."""

    __slots__ = ("_finished", "_getters", "_items", "_maxsize", "_putters", "_unfinished")

    def __init__(self, maxsize: int = 0) -> None:
        if type(maxsize) is not int:
            raise TypeError(f"maxsize must be an int, not {_type_name(maxsize)}")
        self._maxsize = maxsize
        self._items: Any = self._new()
        self._getters: deque[_Future] = deque()
        self._putters: deque[_Future] = deque()
        self._unfinished = 0
        self._finished = Event()
        self._finished.set()

    def _new(self) -> Any:
        return deque()

    def _put(self, item: Any) -> None:
        self._items.append(item)

    def _get(self) -> Any:
        return self._items.popleft()

    def __repr__(self) -> str:
        return f"<{_type_name(self)} maxsize={self._maxsize} qsize={len(self._items)}>"

    @property
    def maxsize(self) -> int:
        return self._maxsize

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return 0 < self._maxsize <= len(self._items)

    async def put(self, item: Any) -> None:
        while self.full():
            await self._wait(self._putters, "put", self.full)
        self.put_nowait(item)

    async def _wait(self, line: deque[_Future], what: str, still: Callable[[], bool]) -> None:
        # As asyncio's queues: a waiter is taken out of its line when woken; one woken and
        # then cancelled wakes the next in its place.
        waiter = _Future(f"{_type_name(self)}.{what}()")
        line.append(waiter)
        try:
            await waiter
        except BaseException:
            waiter.cancel()
            if waiter in line:
                line.remove(waiter)
            if not still() and not waiter.cancelled():
                _wake_next(line)
            raise

    def put_nowait(self, item: Any) -> None:
        if self.full():
            raise QueueFull
        self._put(item)
        self._unfinished += 1
        self._finished.clear()
        _wake_next(self._getters)

    async def get(self) -> Any:
        while self.empty():
            await self._wait(self._getters, "get", self.empty)
        return self.get_nowait()

    def get_nowait(self) -> Any:
        if self.empty():
            raise QueueEmpty
        item = self._get()
        _wake_next(self._putters)
        return item

    def task_done(self) -> None:
        if self._unfinished <= 0:
            raise ValueError("task_done() called too many times")
        self._unfinished -= 1
        if self._unfinished == 0:
            self._finished.set()

    async def join(self) -> None:
        if self._unfinished > 0:
            await self._finished.wait()


class PriorityQueue(Queue):
    """asyncio's: the smallest item comes out first (a heap)."""

    __slots__ = ()

    def _new(self) -> Any:
        return []

    def _put(self, item: Any) -> None:
        heapq.heappush(self._items, item)

    def _get(self) -> Any:
        return heapq.heappop(self._items)


class LifoQueue(Queue):
    """asyncio's: the last item put comes out first."""

    __slots__ = ()

    def _new(self) -> Any:
        return []

    def _get(self) -> Any:
        return self._items.pop()


class _Timeout(_Opaque):
    """``asyncio.timeout(delay)``: no time passes in a script (its clock is fixed), so it
    never expires; a tool call's time is bounded on the host, by the tool's ``timeout``."""

    __slots__ = ("_when",)

    def __init__(self, when: float | None) -> None:
        self._when = when

    def when(self) -> float | None:
        return self._when

    def reschedule(self, when: float | None) -> None:
        self._when = when

    def expired(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<Timeout [active]>"

    async def __aenter__(self) -> _Timeout:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _AsCompleted(_Opaque):
    """What ``asyncio.as_completed`` gives: a plain iterator of awaitables, the i-th
    resolved as the i-th of the given ones to finish (Python 3.11's; 3.13's ``async for``
    is not there, and says how to write the loop)."""

    __slots__ = ("_slots",)

    def __init__(self, slots: list[_Future]) -> None:
        self._slots = iter(slots)

    def __iter__(self) -> _AsCompleted:
        return self

    def __next__(self) -> _Future:
        return next(self._slots)

    def __repr__(self) -> str:
        return "<generator object as_completed>"

    def __aiter__(self) -> NoReturn:
        raise TypeError(
            "asyncio.as_completed gives a plain iterator in scripts (Python 3.11's): write "
            "`for next_done in asyncio.as_completed(aws): result = await next_done`"
        )


class _TaskGroup(_Opaque):
    """``asyncio.TaskGroup()``, as asyncio's (CPython 3.11): ``async with`` waits for every
    task it made; the first that fails cancels the others and the block, and the block ends
    with an ExceptionGroup of what failed."""

    __slots__ = (
        "_aborting", "_base_error", "_completed", "_entered", "_errors", "_exiting", "_parent",
        "_parent_cancelled", "_run", "_tasks",
    )  # fmt: skip

    def __init__(self, run: Run) -> None:
        self._run = run
        self._entered = self._exiting = self._aborting = self._parent_cancelled = False
        self._parent: Task | None = None
        self._tasks: dict[_Future, None] = {}
        self._errors: list[BaseException] = []
        self._base_error: BaseException | None = None
        self._completed: _Future | None = None

    def __repr__(self) -> str:
        state = "entered" if self._entered and not self._exiting else "not entered"
        return f"<TaskGroup tasks={len(self._tasks)} {state}>"

    async def __aenter__(self) -> _TaskGroup:
        if self._entered:
            raise RuntimeError("TaskGroup has already been entered")
        self._entered = True
        self._parent = self._run.current
        return self

    def create_task(self, coro: Any, *, name: Any = None, context: Any = None) -> _Future:
        refusal = None
        if not self._entered:
            refusal = (
                "TaskGroup has not been entered: write `async with asyncio.TaskGroup() as tg:`"
            )
        elif self._exiting and not self._tasks:
            refusal = "TaskGroup is finished"
        elif self._aborting:
            refusal = "TaskGroup is shutting down"
        if refusal is not None:
            if type(coro) is types.CoroutineType:
                coro.close()  # this error says it all: not also "never awaited"
            raise RuntimeError(refusal)
        task = self._run._task(
            coro,
            "TaskGroup.create_task takes a coroutine or a tool call, as "
            "tg.create_task(tools.name(...))",
            "tg.create_task({})",
        )
        if task not in self._tasks:
            self._tasks[task] = None
            if task._done:
                self._done(task)
            else:
                task._callbacks.append(functools.partial(self._done, task))
        return task

    def _done(self, task: _Future) -> None:
        self._tasks.pop(task, None)
        if self._completed is not None and not self._tasks:
            self._completed._resolve(True)
        if task.cancelled():
            return
        error = task._retrieve()
        if error is None:
            return
        self._errors.append(error)
        if issubclass(type(error), SystemExit | KeyboardInterrupt) and self._base_error is None:
            self._base_error = error
        if len(self._errors) == 1:
            # Once every task that is ready has run, as asyncio's done callbacks run: the
            # tasks that fail in the same step (their calls' results came together) are all
            # the group's errors, none of them cancelled by the first.
            run = self._run
            run.ready.append(Task(self._stop(), "TaskGroup", ready=run.ready))

    async def _stop(self) -> None:
        parent = self._parent
        if self._aborting or parent is None or parent._done:
            return
        self._abort()
        if not self._exiting:  # the block still runs: cancel it where it waits
            self._parent_cancelled = True
            parent.cancel()

    def _abort(self) -> None:
        self._aborting = True
        for task in list(self._tasks):
            if not task._done:
                task.cancel()

    async def __aexit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self._exiting = True
        if kind is not None and issubclass(kind, GeneratorExit):
            # The run is over and its coroutines are being closed: nothing is left to wait
            # for (a wait here would be "coroutine ignored GeneratorExit").
            self._abort()
            return
        base = issubclass(type(error), SystemExit | KeyboardInterrupt)
        if base and self._base_error is None:
            self._base_error = error
        propagate = error if kind is not None and issubclass(kind, CancelledError) else None
        parent = self._parent
        if self._parent_cancelled:
            # The block's cancellation was the group's own: it ends here, taken or not yet
            # (a block that awaited nothing since has it still to come).
            propagate = None
            if parent is not None and issubclass(type(parent._throw), CancelledError):
                parent._throw = None
        if kind is not None and not self._aborting:
            self._abort()
        while self._tasks:
            if self._completed is None:
                self._completed = _Future("TaskGroup")
            try:
                await self._completed
            except CancelledError as e:
                if not self._aborting:  # the task that holds the group was cancelled
                    propagate = e
                    self._abort()
            self._completed = None
        if self._base_error is not None:
            raise self._base_error
        if propagate is not None and not self._errors:
            raise propagate
        if kind is not None and not issubclass(kind, CancelledError) and error is not None:
            self._errors.append(error)
        if self._errors:
            errors, self._errors = self._errors, []
            raise BaseExceptionGroup("unhandled errors in a TaskGroup", errors) from None


def _is_future(value: Any) -> bool:
    """``asyncio.isfuture``: a task, a tool call's future, gather's."""
    return issubclass(type(value), _Future)


def _one_awaitable(function: str, given: Any) -> None:
    """Refuse one awaitable where a list of them must be (CPython: "expect a list of
    futures, not Task")."""
    if issubclass(type(given), _Future):
        shown = given._shown()
    elif type(given) is types.CoroutineType:
        shown = f"{given.__qualname__[:100]}(...)"
    else:
        return
    raise TypeError(f"{function} takes a list of awaitables, not one: write {function}([{shown}])")


_RETURN_WHEN = ("FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED")
_WAIT_TAKES = "asyncio.wait and asyncio.as_completed take tasks, coroutines and tool calls"

# asyncio's names a script has that hold nothing of one run.
_ASYNCIO_STATIC: dict[str, Any] = {
    "CancelledError": CancelledError,
    "InvalidStateError": InvalidStateError,
    "TimeoutError": TimeoutError,
    "QueueEmpty": QueueEmpty,
    "QueueFull": QueueFull,
    "Semaphore": Semaphore,
    "BoundedSemaphore": BoundedSemaphore,
    "Lock": Lock,
    "Event": Event,
    "Queue": Queue,
    "PriorityQueue": PriorityQueue,
    "LifoQueue": LifoQueue,
    **{name: name for name in _RETURN_WHEN},
}

# What a model reaches for in asyncio that a script does not have, and what it has instead.
_NO_LOOP = (
    ": no event loop is exposed, and none is needed: a script is the body of an async "
    "function already, so await what you would run on a loop"
)
_NO_SYSTEM = ": a script has no threads, processes or network; it reaches the world through tools"
_ASYNCIO_ABSENT: dict[str, str] = {
    **dict.fromkeys(
        ("get_event_loop", "get_running_loop", "new_event_loop", "set_event_loop"), _NO_LOOP
    ),
    **dict.fromkeys(
        (
            "to_thread", "run_in_executor", "create_subprocess_exec", "create_subprocess_shell",
            "open_connection", "start_server", "open_unix_connection", "start_unix_server",
        ),
        _NO_SYSTEM,
    ),
}  # fmt: skip


class _NotPlain(Exception):
    """What is not data, and where: ``line`` is the script's line that made it, when known
    (a call not awaited: where it was called)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


class _Walk:
    """What :func:`_plain` keeps while it walks one value: the containers it is in (a value
    that holds itself is refused) and the weight of what it met so far (see
    :func:`sandbox.jsontext.weight`)."""

    __slots__ = ("parents", "weight")

    def __init__(self) -> None:
        self.parents: list[int] = []
        self.weight = 0


def _plain(value: Any, root: str, path: tuple[str | int, ...], depth: int, walk: _Walk) -> Any:
    """A copy of ``value`` made of JSON data only; raises _NotPlain saying what is not, and
    where: ``path`` in ``root`` ("the argument"), as the engine's data checks say it."""
    walk.weight += ITEM_WEIGHT
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is str:
        walk.weight += text_weight(value)
        return value
    # By the type, never isinstance: an object's __class__ may be a script's property.
    # The value itself, as json.dumps reads it: int() and float() call a subclass's own
    # __int__ and __float__, which could say another number than the one compared and shown.
    if issubclass(kind, int):  # True and False are above
        number = int.__int__(value)
        if not _INT_MIN <= number <= _INT_MAX:
            raise _NotPlain(
                f"{_where(root, path)} is an integer too large for JSON data; pass it as a string"
            )
        return number
    if issubclass(kind, float):
        real = float.__float__(value)
        if math.isnan(real) or math.isinf(real):
            raise _NotPlain(f"{_where(root, path)} is {real}, which JSON cannot carry")
        return real
    if issubclass(kind, str):
        text = str.__str__(value)
        walk.weight += text_weight(text)
        return text
    if issubclass(kind, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise _NotPlain(
                f"{_where(root, path)} nests deeper than {MAX_DEPTH} levels of dicts and lists, "
                "the most data may nest to cross between the sandbox and the host (MAX_DEPTH); "
                "flatten it"
            )
        if id(value) in walk.parents:
            raise _NotPlain(f"{_where(root, path)} refers to itself; data must be a tree")
        walk.parents.append(id(value))
        try:
            if issubclass(kind, dict):
                out = {}
                for key, item in value.items():
                    if issubclass(type(key), str):
                        name = str.__str__(key)
                        walk.weight += ITEM_WEIGHT + text_weight(name)
                    elif issubclass(type(key), int | float) and type(key) is not bool:
                        try:
                            name = str(_plain(key, root, path, depth, walk))
                        except _NotPlain:
                            # Not "<path> is nan": the dict at path is data, its key is not.
                            raise _NotPlain(
                                f"{_where(root, path)} has a key that is {_unkeyable(key)}; "
                                "a number key becomes JSON text only when finite (an int: "
                                "within 64 bits); make it a string"
                            ) from None
                    else:
                        raise _NotPlain(
                            f"{_where(root, path)} has a key of type {_type_name(key)}; "
                            "keys are strings"
                        )
                    if name in out:
                        raise _NotPlain(
                            f"{_where(root, path)} has the keys {_colliding(value, name, key)}, "
                            f"both {name!r} as JSON data's keys, which are strings (a number key "
                            "becomes its text); keep one"
                        )
                    out[name] = _plain(item, root, (*path, name), depth + 1, walk)
                return out
            return [_plain(item, root, (*path, i), depth + 1, walk) for i, item in enumerate(value)]
        finally:
            walk.parents.pop()
    if issubclass(kind, _Future):
        raise _NotPlain(f"{_where(root, path)} is not data: {value._misuse()}", value._line)
    hint = ""
    if issubclass(kind, _datetime.date | _datetime.time):
        hint = " (pass value.isoformat())"
    elif issubclass(kind, set | frozenset):
        hint = " (pass a list)"
    elif issubclass(kind, decimal.Decimal):
        hint = " (pass str(value) or float(value))"
    elif kind is types.CoroutineType:
        hint = " (await it for its value; for a list of them, await asyncio.gather(*them))"
    elif kind is _ToolFunction:  # `return tools.name`, meant as a call's result
        hint = f" (call and await it for the data it gives: `await {_call_form(value._name)}`)"
    elif kind is types.FunctionType:  # `return main`, meant as `return await main()`
        awaited = "call and await" if inspect.iscoroutinefunction(value) else "call"
        hint = f" ({awaited} it for the data it makes)"
    elif issubclass(kind, enum.Enum):
        hint = " (pass value.value, or value.name)"
    elif dataclasses.is_dataclass(kind):
        hint = " (pass dataclasses.asdict(value))"
    elif issubclass(kind, bytes | bytearray):
        hint = " (pass value.decode(), or base64.b64encode(value).decode())"
    elif issubclass(kind, types.SimpleNamespace):
        hint = " (pass a dict)"
    name = _type_name(value)
    raise _NotPlain(
        f"{_where(root, path)} is {with_article(name)}{hint}; data "
        "must be plain (dict, list, tuple, str, int, float, bool, None)"
    )


def _unkeyable(key: int | float) -> str:
    """What a number key JSON cannot carry is, by its type (never the script's repr; a huge
    integer's digits may be thousands)."""
    if issubclass(type(key), int):
        return "an integer past 64 bits"
    return str(float.__float__(key))


def _colliding(value: dict[Any, Any], name: str, key: Any) -> str:
    """``1 and '1'``: the key of ``value`` met before ``key`` that JSON also names ``name``,
    and ``key``, as the script wrote them (by the value's type, never the script's repr)."""

    def shown(key: Any) -> tuple[str, str]:  # (its JSON name, as written)
        if issubclass(type(key), str):
            return str.__str__(key), str.__repr__(key)
        number = int.__int__(key) if issubclass(type(key), int) else float.__float__(key)
        return str(number), repr(number)

    written = shown(key)[1]
    try:
        # The keys before the first of the two were data (each checked as it was met).
        earlier = next(b for a, b in map(shown, dict.__iter__(value)) if a == name)
    except (TypeError, ValueError, StopIteration):  # a dict whose items() are not its keys
        return f"{written} twice"
    return f"{earlier} and {written}"


def _where(root: str, path: tuple[str | int, ...]) -> str:
    """``items[2].name in the argument``; ``the argument`` itself."""
    return f"{data_path(path)} in {root}" if path else root


def _json(
    value: Any, root: str, identities: _Identities | None = None, at: list[int] | None = None
) -> str:
    """JSON text of plain data (lone surrogates replaced, as in JavaScript); raises TypeError,
    and puts in ``at``, when given, the script's line that made what is not data, if known.
    With ``identities``, the addresses CPython's reprs wrote in its strings are taken out
    (:meth:`_Identities.data`): the plain data is walked again only when the text holds one,
    never the script's values nor the text decoded."""
    walk = _Walk()
    try:
        data = _plain(value, root, (), 0, walk)
    except _NotPlain as e:
        if at is not None and e.line:
            at.append(e.line)
        raise TypeError(str(e)) from None
    except MemoryError:
        # The copy made so far is held by the error's frames until this block ends; the
        # memory limit's ending needs that room (a dict whose items() never ends filled it,
        # and the run died reporting nothing).
        data = _NO_OBJECT
    if data is _NO_OBJECT:
        raise MemoryError
    text = _dumps(data, walk.weight)
    if identities is not None and _addressed(text):
        # Taking addresses out only shortens strings: the weight still bounds the text.
        text = _dumps(identities.data(data, root), walk.weight)
    return text


def _dumps(data: Any, weight: int) -> str:
    """JSON text of ``data`` made by _plain, of that weight."""
    if not jsontext.over(weight):  # orjson's buffer fits: see jsontext
        try:
            return orjson.dumps(data).decode()
        except orjson.JSONEncodeError:  # a lone surrogate in a string
            pass
    return _well_formed(json.dumps(data, ensure_ascii=False, separators=(",", ":")))


def _depth() -> int:
    """Frames on the stack now (in a sandbox process a dozen; more under a test)."""
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return depth


# An address as CPython's default reprs write it, at the end of `<...>` (`<map object at
# 0x7f3a...>`, `<generator object <genexpr> at 0x...>`, hashlib's `<sha256 _hashlib.HASH
# object @ 0x...>`): not one of the run's numbers, which are small, nor a text's own words.
_ADDRESS = re.compile(r"(<(?:[^<>\n]|<[^<>\n]*>){1,300}?)( at | @ )0x([0-9a-f]{6,16})>")
# The end of every address _ADDRESS finds, in a string or in the JSON text that holds it (no
# character of it is escaped there): the addresses a text the run was given holds, loosely.
_ADDRESS_END = re.compile(r"(?: at | @ )0x([0-9a-f]{6,16})>")


def _addressed(text: str) -> bool:
    """Whether ``text`` (or the strings of the JSON text ``text``) may hold an address as
    CPython writes one (see _ADDRESS): a text that holds none costs one search for three
    characters."""
    return " 0x" in text and _ADDRESS_END.search(text) is not None


class _Sink(_Opaque):
    """``sys.stdout`` and ``sys.stderr`` while a script runs: text goes to its printed text.

    A ``PrettyPrinter`` the script makes keeps it; it holds its run under a name the script
    cannot read, and has no ``__dict__`` and no copy."""

    __slots__ = ("_run",)

    def __init__(self, run: Run) -> None:
        self._run = run

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {_type_name(text)}")
        run = self._run
        if not run.ended:
            # `print(map(f, xs))`, `print(fetch)`: an address differs from run to run, so a
            # live run and a replay printed other text.
            run.printed.write(_well_formed(run.identities.text(text)))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    # What a program's habits read or call on sys.stdout, `sys.stdout.reconfigure(encoding=
    # "utf-8")` before it prints other than ASCII: the printed text is text, UTF-8 already.
    encoding = "utf-8"
    errors = "strict"

    def reconfigure(
        self,
        *,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        line_buffering: bool | None = None,
        write_through: bool | None = None,
    ) -> None:
        """Nothing to set: any text is printed as it is."""

    def writable(self) -> bool:
        return True

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> NoReturn:
        # Only for a name it has not: CPython's text named the class, `_Sink`.
        raise AttributeError(
            f"the printed text (sys.stdout, sys.stderr) has no attribute {name!r} in scripts: "
            "it takes text, and has write, writelines, flush, isatty, writable, reconfigure, "
            "encoding and errors",
            name=name,
            obj=self,
        )


def _well_formed(text: str) -> str:
    """``text`` as JavaScript's strings cross to UTF-8: a surrogate pair is its character
    and a lone surrogate U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


class _ToolFunction(_Opaque):
    __slots__ = ("_name", "_run")

    def __init__(self, run: Run, name: str) -> None:
        self._run = run
        self._name = name

    # `self` positional-only: a tool may take an argument called `self`.
    def __call__(self, /, *args: Any, **kwargs: Any) -> _Future:
        return self._run._tool_call(self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<tool {self._name}>"

    def __getattr__(self, name: str) -> str:
        # Named as a function is (a script logs which tool it calls by its __name__), and
        # only called: no other attribute, said without the sandbox's class.
        if name in ("__name__", "__qualname__"):
            return self._name
        called = _call_form(self._name)
        raise AttributeError(
            f"{called.removesuffix('(...)')} has no attribute {name!r}: a tool is called, as "
            f"`await {called}`"
        )

    def __await__(self) -> NoReturn:
        called = _call_form(self._name)
        raise TypeError(
            f"{called.removesuffix('(...)')} is the tool, not a call of it: write "
            f"`await {called}` with its arguments"
        )


class Tools(_Opaque):
    """``tools``: ``await tools.name(key=value)`` or ``await tools.name({"key": value})``."""

    __slots__ = ("_functions", "_run")
    _functions: dict[str, _ToolFunction]
    _run: Run

    def __init__(self, run: Run) -> None:
        _made_once(self, "_run")
        object.__setattr__(self, "_run", run)
        object.__setattr__(self, "_functions", {})

    def __getattr__(self, name: str) -> _ToolFunction:
        functions = self._functions
        function = functions.get(name)
        if function is None:
            run = self._run
            if name not in run.tool_set:
                raise AttributeError(run._unknown_tool(name))
            function = functions[name] = _ToolFunction(run, name)
        return function

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("tools is read-only")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("tools is read-only")

    def __dir__(self) -> list[str]:
        return sorted(self._run.tool_set)

    def __repr__(self) -> str:
        return "<tools>"

    # `for t in tools`, `len(tools)`, `"x" in tools`: CPython said "'Tools' object is not
    # iterable", nothing of how a script lists its tools.
    def __iter__(self) -> NoReturn:
        raise TypeError(
            "tools is not a list: dir(tools) names the tools a script may call, and `await "
            'tools.tool_search(query="...")` finds them by what they do'
        )

    def __len__(self) -> NoReturn:
        self.__iter__()

    def __contains__(self, name: Any) -> NoReturn:
        self.__iter__()  # (`in` would say its own words of a refused __iter__)

    def __bool__(self) -> bool:
        return True  # not len()'s refusal: `if tools:` is true, as of any object

    def __getitem__(self, name: Any) -> NoReturn:
        # `tools[name](...)`, as a dict of functions: CPython said "'Tools' object is not
        # subscriptable".
        raise TypeError(
            "tools is not a dict: a tool is an attribute, `await tools.name(...)`; for a name "
            "held in a variable, write `await getattr(tools, name)(...)`"
        )


class _Stream(_Opaque):
    """A file stream: ``async for item in files.csv(id, limit=10)``; also ``async with``."""

    __slots__ = ("_buffer", "_done", "_handle", "_id", "_index", "_kind", "_options", "_run")

    def __init__(self, run: Run, kind: str, file_id: Any, options: dict[str, Any]) -> None:
        self._run = run
        self._kind = kind
        self._id = file_id
        self._options = options
        self._handle: int | None = None
        self._buffer: list[Any] = []
        self._index = 0
        self._done = False

    def __aiter__(self) -> _Stream:
        return self

    def __repr__(self) -> str:
        return f"<files.{self._kind} stream of {self._id!r}>"

    async def __anext__(self) -> Any:
        run = self._run
        try:
            if self._handle is None and not self._done:
                self._handle = run._file_op(
                    "open",
                    {"kind": self._kind, "id": self._id, "options": self._options},
                    call=self._kind,
                )
            while self._index >= len(self._buffer):
                if self._done:
                    raise StopAsyncIteration
                batch = run._file_op("next", {"handle": self._handle})
                self._buffer, self._index, self._done = batch["items"], 0, batch["done"]
        except (FileError, TypeError):
            self._done = True
            raise
        item = self._buffer[self._index]
        self._index += 1
        return item

    def close(self) -> None:
        """Stop reading (a loop left early frees its stream this way, or when dropped)."""
        if self._handle is not None and not self._done:
            self._run._file_op("close", {"handle": self._handle}, quiet=True)
        self._done = True
        self._buffer = []

    async def __aenter__(self) -> _Stream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # A stream read as a list, a file or a call's result (`for row in files.csv(id)`):
    # CPython's text named the class, "'_Stream' object is not iterable", and not `async`.
    def _misread(self, how: str) -> TypeError:
        shown = f"files.{self._kind}(...)"
        return TypeError(
            f"{shown} is a stream, {how}: write `async for row in {shown}:` (or `[row async "
            f"for row in {shown}]`); `await files.text(id)` reads a whole file"
        )

    def __iter__(self) -> NoReturn:
        raise self._misread("read with `async for`, not `for`")

    def __enter__(self) -> NoReturn:
        raise self._misread("opened with `async with`, not `with`")

    def __exit__(self, *exc: object) -> None:
        """Never reached (``__enter__`` raises); ``with`` needs both to say why."""

    def __await__(self) -> NoReturn:
        raise self._misread("read item by item, not awaited")

    def __del__(self) -> None:
        with contextlib.suppress(BaseException):  # never raise from a finalizer
            self.close()


_FILES_NOT_A_LIST = (
    "files is not a list of the files: `files.list()` lists them (id, mime, size), and `await "
    "files.text(id)` reads one"
)


class Files(_Opaque):
    """``files``: the JavaScript API with Python names (see the README's Python section)."""

    __slots__ = ("_run",)

    def __init__(self, run: Run) -> None:
        self._run = run

    def __repr__(self) -> str:
        return "<files>"

    def list(self) -> Any:
        return self._run._file_op("list", {})

    def stat(self, id: Any) -> Any:
        return self._run._file_op("stat", {"id": id})

    async def text(self, id: Any) -> Any:
        return self._run._file_op("text", {"id": id})

    def show(self, id: Any) -> None:
        self._run._file_op("show", {"id": id})

    async def sheets(self, id: Any) -> Any:
        return self._run._file_op("sheets", {"id": id})

    def lines(self, id: Any, **options: Any) -> _Stream:
        return _Stream(self._run, "lines", id, options)

    def jsonl(self, id: Any, **options: Any) -> _Stream:
        return _Stream(self._run, "jsonl", id, options)

    def csv(self, id: Any, **options: Any) -> _Stream:
        return _Stream(self._run, "csv", id, options)

    def chunks(self, id: Any, **options: Any) -> _Stream:
        return _Stream(self._run, "chunks", id, options)

    def xlsx(self, id: Any, **options: Any) -> _Stream:
        return _Stream(self._run, "xlsx", id, options)

    # `files["a.csv"]`, `for f in files`, `len(files)`: CPython's text named the class, which
    # no script sees (`'Files' object is not subscriptable`), and nothing of files.list().
    def __getitem__(self, key: Any) -> NoReturn:
        raise TypeError(_FILES_NOT_A_LIST)

    def __iter__(self) -> NoReturn:
        raise TypeError(_FILES_NOT_A_LIST)

    def __len__(self) -> NoReturn:
        raise TypeError(_FILES_NOT_A_LIST)

    def __contains__(self, key: Any) -> NoReturn:
        raise TypeError(_FILES_NOT_A_LIST)  # (`in` would say its own words of __iter__'s)

    def __bool__(self) -> bool:
        return True  # not len()'s refusal: `if files:` is true, as of any object

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # its own slot, set as it is made
            object.__setattr__(self, name, value)
        else:
            raise AttributeError("files is read-only")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("files is read-only")

    def __getattr__(self, name: str) -> NoReturn:
        # Only for a name it has not (`files.read(id)`, a guess): CPython's text named the
        # class, `'Files' object`, and nothing it has.
        has = [n for n in Files.__dict__ if not n.startswith("_")]
        raise AttributeError(
            f"files has no attribute {name!r} in scripts; it has {', '.join(has)} "
            "(`await files.text(id)` reads a whole file)",
            name=name,
            obj=self,
        )


class Run(Replay):
    """One run of one Python script. Create, then call :meth:`execute` once."""

    STEERING = "the clock (time, datetime) and random"
    STUCK = Replay.STUCK + (
        " (an Event nothing sets, a Queue nothing fills, a Lock or Semaphore never released, "
        "or a task that awaits itself?)"
    )

    def __init__(self, script: Script, channel: Channel, fetch: Fetch | None = None) -> None:
        super().__init__(script, channel, fetch)
        self.tool_set = frozenset(self.tool_names)
        self.ready: deque[Task] = deque()
        self.current: Task | None = None  # the task running now (asyncio.current_task)
        # Numbers for the futures the script sees, in the order it makes them (_Future).
        self.numbers = itertools.count(1)
        # The futures of recorded calls that settle when the queue is next empty (version 2).
        self.deferred_futures: list[tuple[_Future, str]] = []
        # The calls, tasks and gathers that failed and whose error nothing has retrieved yet,
        # in the order they failed (see _Future). Kept to the run's end, as asyncio keeps a
        # failed task until it is collected, to be reported then (_unretrieved).
        self.failures: dict[_Future, None] = {}
        # The lines of the script's `if __name__ == "__main__":` blocks (compile_script).
        self.main_guards: list[int] = []
        # The line of its last statement and its warning, if that leaves a value (compile_script).
        self.bare_ending: tuple[int, str] | None = None
        self.modules: dict[str, Module] = {}
        self.main: Task | None = None
        self.exited = False  # a task other than main ended the program (see _exit)
        self.main_code: types.CodeType | None = None
        # The script's module (its globals), in sys.modules while it runs: dataclasses looks
        # a class's module up there (for a string annotation).
        self.module = types.ModuleType(_MAIN)
        self.sink = _Sink(self)
        # The numbers that stand for addresses in the script (id(), its objects' reprs), and
        # the addresses CPython's reprs write, taken out of the text it prints, sends,
        # returns or fails with.
        self.identities = _Identities()
        self.identities.read_given = self._read_given
        self.given_upto = 0  # the records whose results _read_given has read
        # What the script set that holds for its whole run, as it left it when a live segment
        # ended (None before): sys.stdout and sys.stderr (contextlib.redirect_stdout), and
        # warnings' filters and show functions (its simplefilter, catch_warnings).
        self.kept: tuple[Any, ...] | None = None
        self.warned: set[str] = set()
        self.reserve: bytearray | None = None
        self.settle = self._settle
        # The script's async generators that have begun, in the order they began: those
        # left unfinished when nothing else can run are closed then (_close_left).
        self.generators: weakref.WeakKeyDictionary[Any, None] = weakref.WeakKeyDictionary()

    # ---- what the script calls ----

    def _unknown_tool(self, name: str) -> str:
        said = None
        if name == "run_code":
            said = "tools.run_code cannot be called from a script: a script is already running code"
        line = _script_line()
        text = self.script_lines[line - 1] if 1 <= line <= len(self.script_lines) else ""
        return no_such_tool(name, self.tool_names, said, line=text)

    def _tool_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Future:
        if _collecting_on == _thread.get_ident():
            # A finalizer (__del__, a weakref callback) that the garbage collector runs: when
            # it runs depends on the process's every allocation, the sandbox's own included,
            # which differ between a live run and a replay; a call made there would make the
            # next run's calls differ from the log's (DivergenceError).
            # (Python ignores what a finalizer raises: _unraisable prints it, once.)
            raise RuntimeError(
                f"tools.{name} was called in code the garbage collector ran (a __del__ "
                "method or a weakref callback of an object in a reference cycle), which "
                "runs at a different point on each run of the script; the call was not "
                "made: call tools from the script's own code"
            )
        # A call whose arguments are wrong is not made, and awaiting it raises why, as a
        # coroutine's own check of them would: gather(..., return_exceptions=True) keeps the
        # other calls (raised at the call, it failed the whole gather).
        try:
            if args:
                if kwargs or len(args) > 1 or not isinstance(args[0], dict):
                    raise TypeError(
                        f"tools.{name} takes keyword arguments, as tools.{name}(key=value), or "
                        f"one dict, as tools.{name}({{'key': value}})"
                    )
                given = args[0]
            else:
                given = kwargs
            # A top-level None is an argument left out (JavaScript's undefined).
            arguments = {k: v for k, v in given.items() if v is not None}
            # `tools.echo(text=str(obj))`: CPython wrote the object's address, which differs
            # from run to run, so a replay made another call than the log's.
            text = _json(arguments, "the argument", self.identities)
        except TypeError as e:
            refused = _Call(name, self.failures, _script_line(), next(self.numbers))
            refused._reject(e)
            return refused
        answer = self._call(name, text)
        tag, rest = answer[:1], answer[1:]
        future = _Call(name, self.failures, _script_line(), next(self.numbers))
        if tag == "r":
            future._resolve(jsontext.loads(rest))
        elif tag == "e":
            future._reject(ToolError(rest, name))
        elif tag == "t":
            future._reject(TypeError(rest))
        elif tag == "l":
            future._reject(LimitError(rest))
        elif tag == "d":
            self.deferred_futures.append((future, name))
        elif tag == "L":  # it met a limit of the script's: the run ends on it at this line
            line = future._line
            text = self.script_lines[line - 1][:300] if 1 <= line <= len(self.script_lines) else ""
            self.end_at_limit([ErrorLine(line=line, text=text)] if text else [])
        elif tag == "x":  # the run has ended (in this process only: the real one has exited)
            raise _Ended
        # "p": a new call, which never settles in this run.
        return future

    def _read_given(self) -> None:
        """The addresses in the results and errors of the calls made so far, each read once
        (see _Identities.given). A replay may read a result the script has not seen yet,
        which a live run reads later: no text of the script's holds an address in it before
        it has seen it, but by the chance that one of its own objects is there."""
        upto = min(self.position, len(self.records))
        for record in self.records[self.given_upto : upto]:
            if record.error is not None:
                self.identities.given(record.error)
            else:
                self.identities.given_data(record.result)
        self.given_upto = max(self.given_upto, upto)

    def _settle(self, answers_json: str) -> None:
        answers = jsontext.loads(answers_json)
        count = len(answers)
        futures, self.deferred_futures = (
            self.deferred_futures[:count],
            self.deferred_futures[count:],
        )
        for (future, name), answer in zip(futures, answers, strict=True):
            if answer[0] == 1:
                future._resolve(answer[1])
            else:
                future._reject(ToolError(answer[1], name))

    def _file_op(
        self, op: str, args: dict[str, Any], quiet: bool = False, call: str | None = None
    ) -> Any:
        """The core's answer to files ``op``; a TypeError for arguments that are not data
        names the ``files`` method the script called (``call``, else ``op``)."""
        answer = self._file(op, _json(args, f"files.{call or op}(...)"))
        tag, rest = answer[:1], answer[1:]
        if tag == "r":
            self.identities.given(rest)
            # A long answer (a file's text, a long line) by the standard library: see jsontext.
            return jsontext.loads(rest)
        if quiet:
            return None
        if tag == "t":
            raise FileError(rest)
        raise _Ended

    def _import(
        self,
        name: str,
        globals: Any = None,
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> Module:
        module = self.modules.get(name) if level == 0 else None
        if module is None and level == 0 and type(name) is str and name in _MADE_ON_IMPORT:
            # Made at its first import, not with the run: most scripts import neither.
            module = self.modules[name] = _MADE_ON_IMPORT[name](self)
        if module is not None and not fromlist and "." in name:
            # `import urllib.parse` binds `urllib` (`from urllib.parse import x` gives parse)
            module = self.modules.get(name.partition(".")[0])
        if module is None and type(fromlist) is list and name in sys.modules:
            # C code importing on its own (PyImport_Import, as datetime.strptime does) from
            # under a script's frame: a module already loaded, for that code, not the script
            # (whose import statements pass None or a tuple, and which cannot name
            # __import__ to call it itself).
            return sys.modules[name]  # type: ignore[return-value]
        if module is None:
            head = name.partition(".")[0] if type(name) is str else ""
            if head in _GIVEN:
                raise ImportError(
                    f"module {name} is not available in scripts{_GIVEN[head]}", name=name
                )
            why = _NOT_HERE.get(head, "").format(release=f"{_VERSION[0]}.{_VERSION[1]}")
            raise ImportError(
                f"module {name} is not available in scripts{why}; these are: {', '.join(ALLOWED)}",
                name=name,
            )
        return module

    # ---- the scheduler ----

    def _task(
        self,
        awaitable: Any,
        refusal: str = "a script awaits coroutines and tool calls",
        maker: str = "{}",
    ) -> _Future:
        """``awaitable`` as a future the scheduler runs; a TypeError, ``refusal`` naming what
        was given, for anything that cannot be awaited. A new task is shown as ``maker``
        made it (``asyncio.create_task({})``), ``{}`` being the awaitable."""
        # By the type, never isinstance: an object's __class__ may be a script's property.
        kind = type(awaitable)
        if issubclass(kind, _Future):
            return awaitable
        if kind is types.CoroutineType:
            shown = f"{awaitable.__qualname__[:100]}(...)"
        elif hasattr(kind, "__await__"):  # asyncio.sleep, a script's own awaitable
            shown = f"{_type_name(awaitable)[:100]}(...)"
            if kind is _Yield:
                shown = "asyncio.sleep(...)"
                awaitable._taken = True  # a task that never runs does not warn of it either
            awaitable = _await(awaitable)
        elif kind is types.FunctionType and type(name := awaitable.__qualname__) is str:
            # `asyncio.create_task(fetch)`: the coroutine function uncalled.
            raise TypeError(
                f"{refusal}, not function: call it, and pass what it gives ({name[:100]}(...))"
            )
        else:
            raise TypeError(f"{refusal}, not {_type_name(awaitable)}")
        task = Task(
            awaitable,
            maker.format(shown),
            self.failures,
            _script_line(),
            next(self.numbers),
            self.ready,
        )
        self.ready.append(task)
        return task

    def _gather(self, *awaitables: Any, return_exceptions: bool = False) -> _Future:
        if len(awaitables) == 1 and issubclass(type(awaitables[0]), list | tuple):
            # CPython says "unhashable type: 'list'" there.
            raise TypeError(
                "asyncio.gather takes each awaitable as an argument of its own, not a list of "
                "them: write asyncio.gather(*calls)"
            )
        made: dict[int, _Future] = {}  # one awaitable given twice is one child, as asyncio's
        children = []
        for a in awaitables:
            if id(a) not in made:
                made[id(a)] = self._task(a)
            children.append(made[id(a)])
        out = _Gather("asyncio.gather(...)", self.failures, _script_line(), next(self.numbers))
        out._children = children
        results: list[Any] = [None] * len(children)
        left = [len(children)]
        if not children:
            out._resolve([])
        for i, child in enumerate(children):

            def done(i: int = i, child: _Future = child) -> None:
                # Every child's error is taken (as asyncio's gather takes it): the first
                # goes on as gather's own, which is reported if nothing takes that.
                error = child._retrieve()
                if out._done:
                    return
                if error is not None and not return_exceptions:
                    out._reject(error)
                    return
                results[i] = error if error is not None else child._value
                left[0] -= 1
                if left[0] == 0:
                    out._resolve(results)

            if child._done:
                done()
            else:
                child._callbacks.append(done)
        return out

    def _sys(self) -> Module:
        """``sys`` as scripts have it: what a program's habits reach for. ``stdout`` and
        ``stderr`` are the printed text (``print(..., file=sys.stderr)``), ``exit`` ends the
        script (a status of 0 or none as finished, any other as failed), ``argv`` names no
        arguments; the interpreter's constants. None of the process: its paths, modules,
        input or limits."""

        def exit(status: Any = None) -> NoReturn:
            raise SystemExit(status)

        return Module(
            "sys",
            {
                "stdout": self.sink,
                "stderr": self.sink,
                "exit": exit,
                "argv": ["<script>"],
                "maxsize": sys.maxsize,
                "byteorder": sys.byteorder,
                "float_info": sys.float_info,
                "int_info": sys.int_info,
                "version_info": sys.version_info,
            },
            {
                "stdin": "; a script takes no input: it reaches the host through `tools`",
                "version": "; use sys.version_info",
                **dict.fromkeys(
                    ("path", "modules", "executable", "platform"),
                    "; a script has no file system, environment or processes",
                ),
            },
        )

    def _traceback(self) -> Module:
        """``traceback`` as scripts have it: the error being handled, or one given, as
        CPython's traceback writes it (``except Exception: traceback.print_exc()``, a habit of
        code that logs and goes on), with the script's frames only (the sandbox's are not the
        script's to see) and its lines' text. Printed text goes where ``print`` goes."""

        def format_exception(
            exc: Any,
            /,
            value: Any = _NO_VALUE,
            tb: Any = None,
            limit: Any = None,
            chain: Any = True,
        ) -> list[str]:
            # The form of before 3.10, (type, value, tb): a script has no traceback object to
            # give (`__traceback__` is not its to read), so its tb is None, and the error is
            # written without frames of its own, as CPython writes it then.
            error = _exception_given(exc, value)
            if error is None:
                return [_NO_EXCEPTION]
            return self._traceback_lines(error, _limit(limit), bool(chain), value is _NO_VALUE)

        def format_exception_only(exc: Any, /, value: Any = _NO_VALUE) -> list[str]:
            error = _exception_given(exc, value)
            return [_NO_EXCEPTION if error is None else _exception_line(error)]

        def format_exc(limit: Any = None, chain: Any = True) -> str:
            return "".join(format_exception(sys.exc_info()[1], limit=limit, chain=chain))

        def print_exception(
            exc: Any,
            /,
            value: Any = _NO_VALUE,
            tb: Any = None,
            limit: Any = None,
            file: Any = None,
            chain: Any = True,
        ) -> None:
            text = "".join(format_exception(exc, value, tb, limit, chain))
            (self.sink if file is None else file).write(text)

        def print_exc(limit: Any = None, file: Any = None, chain: Any = True) -> None:
            print_exception(sys.exc_info()[1], limit=limit, file=file, chain=chain)

        instead = (
            ": a script's frames are not its to read; traceback.format_exc() gives the error "
            "being handled as text, with the script's lines"
        )
        return Module(
            "traceback",
            {
                "format_exc": format_exc,
                "format_exception": format_exception,
                "format_exception_only": format_exception_only,
                "print_exc": print_exc,
                "print_exception": print_exception,
            },
            dict.fromkeys(
                (
                    "extract_tb", "extract_stack", "format_tb", "format_stack", "print_tb",
                    "print_stack", "walk_tb", "walk_stack", "TracebackException",
                    "StackSummary", "FrameSummary", "format_list", "print_list", "print_last",
                    "clear_frames",
                ),
                instead,
            ),
        )  # fmt: skip

    def _logging(self) -> Module:
        """``logging`` as scripts have it: CPython's loggers, handlers and formatters, in a
        tree of the run's own (a logger the script configures is the script's), writing to
        the printed text (sys.stderr, unless a handler is given another stream). Records
        carry the script's clock, the script's line, and the same process and thread ids on
        every run. No handler reaches a file."""
        root = _ScriptRoot(logging.WARNING)
        manager = logging.Manager(root)
        manager.loggerClass = _ScriptLogger
        root.manager = manager

        def getLogger(name: str | None = None) -> logging.Logger:
            if not name or (isinstance(name, str) and name == root.name):
                return root
            return manager.getLogger(name)

        def basicConfig(**kwargs: Any) -> None:
            # logging.basicConfig, on this run's root, without files.
            if kwargs.pop("force", False):
                for handler in root.handlers[:]:
                    root.removeHandler(handler)
                    handler.close()
            if root.handlers:
                return
            if "filename" in kwargs or "filemode" in kwargs:
                raise ValueError("logging.basicConfig(filename=...)" + _NO_FILES)
            handlers = kwargs.pop("handlers", None)
            if handlers is not None and "stream" in kwargs:
                raise ValueError(
                    "'stream' or 'filename' should not be specified together with 'handlers'"
                )
            if handlers is None:
                handlers = [_ScriptStreamHandler(kwargs.pop("stream", None))]
            datefmt = kwargs.pop("datefmt", None)
            style = kwargs.pop("style", "%")
            if style not in logging._STYLES:
                raise ValueError("Style must be one of: " + ",".join(logging._STYLES))
            formatter = _ScriptFormatter(
                kwargs.pop("format", logging._STYLES[style][1]), datefmt, style
            )
            for handler in handlers:
                if handler.formatter is None:
                    handler.setFormatter(formatter)
                root.addHandler(handler)
            level = kwargs.pop("level", None)
            if level is not None:
                root.setLevel(level)
            if kwargs:
                raise ValueError("Unrecognised argument(s): " + ", ".join(kwargs))

        def at(method: str) -> Callable[..., None]:
            """logging's function of that name: the root's method, basicConfig() first if
            the root has no handler."""

            def call(*args: Any, **kwargs: Any) -> None:
                if not root.handlers:
                    basicConfig()
                getattr(root, method)(*args, **kwargs)

            call.__name__ = call.__qualname__ = method
            return call

        def disable(level: int = logging.CRITICAL) -> None:
            manager.disable = level
            manager._clear_cache()  # type: ignore[attr-defined]

        names: dict[str, Any] = {
            name: getattr(logging, name)
            for name in (
                "CRITICAL", "FATAL", "ERROR", "WARNING", "WARN", "INFO", "DEBUG", "NOTSET",
                "BASIC_FORMAT", "getLevelName", "getLevelNamesMapping", "Filter",
                "LoggerAdapter", "NullHandler",
            )
        }  # fmt: skip
        names.update(
            getLogger=getLogger,
            basicConfig=basicConfig,
            debug=at("debug"),
            info=at("info"),
            warning=at("warning"),
            warn=at("warning"),
            error=at("error"),
            critical=at("critical"),
            fatal=at("critical"),
            exception=at("exception"),
            log=at("log"),
            disable=disable,
            root=root,
            Logger=_ScriptLogger,
            Formatter=_ScriptFormatter,
            Handler=_ScriptHandler,
            StreamHandler=_ScriptStreamHandler,
            LogRecord=_ScriptRecord,
        )
        return Module(
            "logging",
            names,
            {
                "FileHandler": _NO_FILES,
                "handlers": _NO_FILES,
                "config": "; configure it in the script: logging.basicConfig(level=...)",
                "setLoggerClass": "; a script's loggers are logging.Logger",
            },
        )

    def _traceback_lines(
        self, error: BaseException, limit: int | None, chain: bool, framed: bool
    ) -> list[str]:
        """CPython's ``traceback.format_exception(error)`` with the script's frames only (none
        of ``error``'s own unless ``framed``); the errors it was raised from or while handling
        first, as CPython chains them (at most :data:`_CHAIN_SHOWN`)."""
        links: list[tuple[BaseException, str]] = []
        seen: set[int] = set()
        current: BaseException | None = error
        said = ""
        while current is not None and id(current) not in seen and len(links) < _CHAIN_SHOWN:
            seen.add(id(current))
            links.append((current, said))
            if not chain:
                break
            cause = _CAUSE.__get__(current)
            context = _CONTEXT.__get__(current)
            if cause is not None:
                current, said = cause, _DIRECT_CAUSE
            elif context is not None and not _SUPPRESS_CONTEXT.__get__(current):
                current, said = context, _DURING
            else:
                current = None
        out: list[str] = []
        for link, after in reversed(links):
            frames = self._frames(link, limit) if framed or link is not error else []
            if frames:
                out.append("Traceback (most recent call last):\n")
                out.extend(frames)
            out.append(_exception_line(link))
            if after:
                out.append(after)
        return out

    def _frames(self, error: BaseException, limit: int | None) -> list[str]:
        """The script's frames in ``error``'s traceback, outermost first, as CPython writes
        them; a line repeated more than three times in a row (recursion) is counted."""
        found: list[tuple[int, str]] = []
        tb = _TRACEBACK.__get__(error)  # the real one: a script's class may make it a property
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == FILENAME:
                found.append((tb.tb_lineno, "<module>" if code.co_name == _MAIN else code.co_name))
            tb = tb.tb_next
        if limit is not None:
            found = found[:limit] if limit >= 0 else found[limit:]
        out: list[str] = []
        last, repeated = None, 0
        for frame in found:
            if frame == last:
                repeated += 1
                if repeated >= _REPEATS_SHOWN:
                    continue
            else:
                if repeated >= _REPEATS_SHOWN:
                    out.append(_repeated(repeated - _REPEATS_SHOWN + 1))
                last, repeated = frame, 0
            number, name = frame
            out.append(f'  File "{FILENAME}", line {number}, in {name}\n')
            if 1 <= number <= len(self.script_lines):
                text = self.script_lines[number - 1].strip()
                if text:
                    out.append(f"    {text[:300]}\n")
        if repeated >= _REPEATS_SHOWN:
            out.append(_repeated(repeated - _REPEATS_SHOWN + 1))
        return out

    def _asyncio(self) -> Module:
        def gather(*awaitables: Any, return_exceptions: bool = False) -> _Future:
            return self._gather(*awaitables, return_exceptions=return_exceptions)

        def create_task(coro: Any, *, name: Any = None) -> _Future:
            # A tool call is already running (its future is its task), and asyncio.sleep is
            # not a coroutine here: each is taken as CPython takes a coroutine or ensure_future
            # an awaitable.
            return self._task(
                coro,
                "asyncio.create_task takes a coroutine or a tool call, as "
                "asyncio.create_task(tools.name(...))",
                "asyncio.create_task({})",
            )

        def ensure_future(awaitable: Any) -> _Future:
            return self._task(
                awaitable, "asyncio.ensure_future takes a coroutine, a task or a tool call"
            )

        def sleep(delay: float = 0, result: Any = None) -> _Yield:
            delay <= 0  # noqa: B015 -- CPython's own check: a str delay is a TypeError
            return _Yield(result)

        def task_group() -> _TaskGroup:
            return _TaskGroup(self)

        async def wait(
            fs: Any, *, timeout: Any = None, return_when: str = "ALL_COMPLETED"
        ) -> tuple[set[_Future], set[_Future]]:
            _one_awaitable("asyncio.wait", fs)
            if return_when not in _RETURN_WHEN:
                raise ValueError(f"Invalid return_when value: {return_when}")
            futures = list(dict.fromkeys(self._task(f, _WAIT_TAKES) for f in fs))
            if not futures:
                raise ValueError("Set of Tasks/Futures is empty.")

            def settled() -> bool:
                done = [f for f in futures if f._done]
                if return_when == "FIRST_COMPLETED":
                    return bool(done)
                if return_when == "FIRST_EXCEPTION" and any(
                    f._error is not None and not f.cancelled() for f in done
                ):
                    return True
                return len(done) == len(futures)

            if not settled():
                waiter = _Future("asyncio.wait(...)")

                def check() -> None:
                    if not waiter._done and settled():
                        waiter._resolve(None)

                for f in futures:
                    if not f._done:
                        f._callbacks.append(check)
                await waiter
            return {f for f in futures if f._done}, {f for f in futures if not f._done}

        def as_completed(fs: Any, *, timeout: Any = None) -> _AsCompleted:
            _one_awaitable("asyncio.as_completed", fs)
            futures = list(dict.fromkeys(self._task(f, _WAIT_TAKES) for f in fs))
            line = _script_line()
            # The i-th awaitable given out is the i-th to finish: it takes that one's error.
            slots = [
                _Future("asyncio.as_completed(...)", self.failures, line, next(self.numbers))
                for _ in futures
            ]
            free = iter(slots)

            def done(future: _Future) -> None:
                slot = next(free, None)
                if slot is None:  # a future the script made anew (__init__) and done again
                    return
                error = future._retrieve()
                if error is None:
                    slot._resolve(future._value)
                else:
                    slot._reject(error)

            for f in futures:
                if f._done:
                    done(f)
                else:
                    f._callbacks.append(functools.partial(done, f))
            return _AsCompleted(slots)

        async def wait_for(fut: Any, timeout: Any = None) -> Any:
            # No time passes in a script: the timeout never fires (see _Timeout).
            return await self._task(fut, "asyncio.wait_for takes a coroutine or a tool call")

        # What a coroutine of theirs never awaited is called: asyncio's names, not the sandbox's
        # ('Run._asyncio.<locals>.wait_for').
        wait.__qualname__, wait_for.__qualname__ = "wait", "wait_for"

        def shield(awaitable: Any) -> _Future:
            inner = self._task(awaitable, "asyncio.shield takes a coroutine or a tool call")
            if inner._done:
                return inner
            outer = _Future(
                "asyncio.shield(...)", self.failures, _script_line(), next(self.numbers)
            )

            def copy() -> None:
                if outer._done:  # cancelled: the inner one goes on, its error taken here
                    if not inner.cancelled():
                        inner._retrieve()
                    return
                error = inner._retrieve()
                if error is None:
                    outer._resolve(inner._value)
                else:
                    outer._reject(error)

            inner._callbacks.append(copy)
            return outer

        def current_task() -> Task | None:
            return self.current

        def iscoroutine(value: Any) -> bool:
            # A tool call is an awaitable future, as asyncio's tasks are, not a coroutine.
            return type(value) is types.CoroutineType

        def timeout(delay: float | None) -> _Timeout:
            return _Timeout(delay)

        def run(main: Any, *, debug: Any = None) -> NoReturn:
            # A model writes a program (`asyncio.run(main())`) where a script is already the
            # body of an async function: CPython's words inside a loop, and what to write.
            shown = "main(...)"
            if type(main) is types.CoroutineType:
                shown = f"{main.__qualname__[:100]}(...)"
                main.close()  # this error says it all: not also "never awaited"
            elif isinstance(main, _Future):
                shown = main._shown()  # `asyncio.run(tools.name(...))`: not `main(...)`
            elif type(main) is _Yield:
                shown = "asyncio.sleep(...)"
                main._taken = True
            elif type(main) is types.FunctionType and type(name := main.__qualname__) is str:
                shown = f"{name[:100]}(...)"  # `asyncio.run(main)`, the function uncalled
            raise RuntimeError(
                "asyncio.run() cannot be called from a running event loop: a script is the "
                f"body of an async function already: in its place, write `return await {shown}`"
            )

        return Module(
            "asyncio",
            {
                **_ASYNCIO_STATIC,
                "gather": gather,
                "create_task": create_task,
                "ensure_future": ensure_future,
                "run": run,
                "sleep": sleep,
                "TaskGroup": task_group,
                "wait": wait,
                "as_completed": as_completed,
                "wait_for": wait_for,
                "shield": shield,
                "current_task": current_task,
                "iscoroutine": iscoroutine,
                "iscoroutinefunction": inspect.iscoroutinefunction,
                "isfuture": _is_future,
                "timeout": timeout,
                "timeout_at": timeout,
            },
            hints=_ASYNCIO_ABSENT,
        )

    def _step(self, task: Task) -> None:
        coro = task._coro
        throw, task._throw = task._throw, None
        self.current = task
        try:
            yielded = coro.send(None) if throw is None else coro.throw(throw)
        except StopIteration as e:
            task._resolve(e.value)
            return
        except _Ended:
            raise
        except BaseException as e:  # the script's own error, SystemExit included
            task._reject(e)
            if issubclass(type(e), SystemExit | KeyboardInterrupt) and task is not self.main:
                self._exit(task)
            return
        finally:
            self.current = None
        if issubclass(type(yielded), _Future):
            if yielded._done or task._throw is not None:  # or cancelled while it ran
                self.ready.append(task)
            else:
                task._waiting = yielded
                yielded._callbacks.append(functools.partial(_wake, task, yielded))
        elif yielded is None:  # asyncio.sleep
            self.ready.append(task)
        else:
            task._throw = TypeError(
                f"a script awaits coroutines and tool calls, not {_type_name(yielded)}"
            )
            self.ready.append(task)

    # ---- the run ----

    def _execute(self) -> Ran:
        script = self.script
        self.identities.given(script.code)
        try:
            code, self.main_guards, self.bare_ending, syntax_warnings = compile_script(script.code)
        except SyntaxError as e:
            line = e.lineno or 0
            lines = self._line_list([line]) if line else []
            message = _cut(str(e.msg), 1000)
            if line and e.offset and e.offset > 0:
                message += f" (column {e.offset})"  # the script's own: it is parsed as written
            message += _syntax_hint(message, lines[0].text if lines else "")
            if lines:
                message = self._unwritable_tool(lines[0].text) or message
            return self._finish(
                Ran(
                    outcome="failed",
                    error=ScriptError(name="SyntaxError", message=message, lines=lines),
                )
            )
        except Refused as e:
            return self._finish(
                Ran(
                    outcome="failed",
                    error=ScriptError(
                        name="SyntaxError",
                        message=_cut(e.message, 1000),
                        lines=self._line_list([e.line]),
                    ),
                )
            )
        except (RecursionError, MemoryError, ValueError) as e:
            # CPython's parser and compiler give up on deeply nested source this way.
            why = "it nests too deeply" if not isinstance(e, ValueError) else str(e)
            return self._finish(
                Ran(
                    outcome="failed",
                    error=ScriptError(
                        name="SyntaxError", message=f"the script cannot be compiled: {why}"
                    ),
                )
            )
        self.modules = dict(_STATIC)
        self.modules.update(_clock_modules(script.clock.now_ms, script.clock.seed))
        self.modules["asyncio"] = self._asyncio()
        builtins_ = dict(_BUILTINS)
        builtins_["__import__"] = self._import
        builtins_.update(self.identities.builtins())
        scope = self.module.__dict__
        scope.update(
            {
                "__builtins__": builtins_,
                "tools": Tools(self),
                "files": Files(self),
                "ToolError": ToolError,
                "LimitError": LimitError,
                "FileError": FileError,
                _FORMAT: _format_view,
                _PRIVATE: _Private,
                _CLOCK: _clock_view,
                _MATCH: _MatchClass,
            }
        )
        # What compiling warned of, printed as the run begins (CPython prints it before a
        # program runs): here, once a run, not in each of a live run's segments.
        for line, text in syntax_warnings:
            self._warn_once(line, "SyntaxWarning", text)
        exec(code, scope)
        main = scope.pop(_MAIN)
        self.main_code = main.__code__  # the script's top level (logging names it <module>)
        # Its error is the run's, never reported.
        self.main = Task(main(), "the script", ready=self.ready)
        self.ready.append(self.main)
        return self._drive()

    def _exit(self, task: Task) -> NoReturn:
        """End the run on ``task``'s ``sys.exit()`` (or KeyboardInterrupt), which asyncio
        lets out of its loop: the program ends there, its error taken (no line says nothing
        awaited it), and no task runs again, in this segment or a live run's next."""
        self.exited = True
        error = task._retrieve()
        self.outcome = ("error", error)
        for future in [f for f in self.failures if f._error is error]:
            del self.failures[future]  # a gather of it failed with it: the same ending
        raise _Exited

    def _drive(self) -> Ran:
        # The script's code may also run once its queue is empty: a returned dict subclass's
        # items(), an error's __str__, a dropped task's `finally`. So all of it, the ending
        # made of its value included, runs inside the fence.
        with self._fenced():
            try:
                while not self.exited:
                    ready = self.ready
                    while ready and not self.ended:
                        self._step(ready.popleft())
                    if self.ended:
                        raise _Ended
                    if not self._settle_recorded() and not self._close_left():
                        break
            except _Exited:
                pass
            except (MemoryError, _Ended):
                self._let_go()
                raise
            main = self.main
            if main is not None and main._done and self.outcome is None:
                if main._error is not None:
                    self.outcome = ("error", main._error)
                else:
                    self.outcome = ("value", main._value)
            if self.outcome is not None and not self.new_calls:
                self._let_go()
            return self._conclude()

    @contextlib.contextmanager
    def _fenced(self) -> Iterator[None]:
        """What holds while the script's code runs: printed text and warnings go to the run,
        recursion is bounded, the script's module is in sys.modules (dataclasses looks a
        class's module up there), a little memory is kept for the ending.

        A live run's segments are one run to the script: what it set of the streams and the
        warnings in one segment holds in the next, as in a replay's single pass; its
        warnings' registries stand too (their version is not bumped between segments)."""
        global _fenced_run
        outer = _fenced_run
        saved = sys.stdout, sys.stderr, sys.getrecursionlimit(), sys.modules.get(_MAIN)
        hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        shown = warnings.filters, warnings.showwarning, warnings._showwarnmsg_impl  # type: ignore[attr-defined]
        if self.kept is None:
            # Every warning reaches _warning, which shows each once a run (CPython's
            # default, kept by the run, not by registries a process keeps from run to run).
            warnings.filters = list(shown[0])
            warnings.simplefilter("always")
            warnings.showwarning = self._warning
            sys.stdout = sys.stderr = self.sink
        else:
            (
                sys.stdout,
                sys.stderr,
                warnings.filters,
                warnings.showwarning,
                warnings._showwarnmsg_impl,  # type: ignore[attr-defined]
            ) = self.kept
        sys.modules[_MAIN] = self.module
        sys.setrecursionlimit(_depth() + RECURSION_LIMIT)
        hooks = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=self.generators.setdefault, finalizer=self._close_dropped)
        self.reserve = bytearray(_RESERVE_BYTES)
        _fenced_run = self
        try:
            yield
        finally:
            _fenced_run = outer
            sys.set_asyncgen_hooks(*hooks)
            self.kept = (
                sys.stdout,
                sys.stderr,
                warnings.filters,
                warnings.showwarning,
                warnings._showwarnmsg_impl,  # type: ignore[attr-defined]
            )
            sys.stdout, sys.stderr = saved[0], saved[1]
            sys.unraisablehook = hook
            sys.setrecursionlimit(saved[2])
            warnings.filters, warnings.showwarning, warnings._showwarnmsg_impl = shown  # type: ignore[attr-defined]
            if saved[3] is None:
                sys.modules.pop(_MAIN, None)
            else:
                sys.modules[_MAIN] = saved[3]
            self.reserve = None

    def _close_left(self) -> bool:
        """Once the script's main has ended (returned or failed) and nothing else can run
        (no task ready, no call waiting for its result), begin closing its async generators
        left unfinished, each by ``aclose()`` in a task, as ``asyncio.run`` does
        (``shutdown_asyncgens``); True if any was. Only those it dropped were closed: one
        main still held when it failed (its error's traceback keeps main's frame) never
        was, and a tool call in its ``finally`` was never made.

        What the garbage collector would drop is collected first, so that which are closed
        here, and in which order, is the same in a live run and a replay."""
        main = self.main
        if main is None or not main._done or self.deferred or not self.generators:
            return False
        gc.collect()
        closed = False
        for agen in list(self.generators):
            # One a task is in the middle of (awaiting in it) is that task's to finish.
            if agen.ag_frame is None or agen.ag_running:
                continue
            del self.generators[agen]
            frame = agen.ag_frame
            line = frame.f_lineno if frame.f_code.co_filename == FILENAME else 0
            shown = _closing_name(agen)
            task = Task(
                _await(agen.aclose()), shown, self.failures, line, next(self.numbers), self.ready
            )
            self.ready.append(task)
            closed = True
        return closed

    def _close_dropped(self, agen: Any) -> None:
        """An async generator the script dropped unfinished (``break`` in ``async for``) is
        closed where it was dropped, as CPython closes it without a loop, and when its
        ``finally`` awaits (a tool call) the rest of its closing goes on in a task of its
        own, as asyncio's loop runs ``aclose()``. Closed in place only, such an await was
        "async generator ignored GeneratorExit", printed as a warning, its call made but
        never awaited; closed in a task only, what it held (a file stream) stayed open
        until the script next waited, and a loop that opened a stream in each generator
        met the ``streams`` limit.

        One the garbage collector drops (a reference cycle) is only closed in place, as
        before: where the collector runs differs between a live run and a replay, and so
        would a task's place in the queue. None is closed outside the run's fence (between
        a live run's segments, after it) nor once its ending is being made: no code of the
        script runs there."""
        # Inside the fence, no reserve means _let_go has begun the ending (the fence sets
        # it as it begins, and only _let_go drops it before the fence ends).
        if _fenced_run is not self or self.ended or self.reserve is None:
            return
        closer = agen.aclose()
        try:
            waits_on = closer.send(None)  # what it raises, Python reports (_unraisable)
        except StopIteration:
            return
        if _collecting_on == _thread.get_ident():
            # Its warning names the line the generator waits at (_unraisable reads the
            # traceback), the same live and replayed; where the collector ran is not.
            frame = agen.ag_frame
            closer.close()
            error = RuntimeError("async generator ignored GeneratorExit")  # CPython's words
            if frame is not None:
                error.__traceback__ = types.TracebackType(
                    None, frame, frame.f_lasti, frame.f_lineno
                )
            raise error
        shown = _closing_name(agen)
        line = _script_line()
        frame = agen.ag_frame
        if not line and frame is not None and frame.f_code.co_filename == FILENAME:
            line = frame.f_lineno  # dropped as the script ended: where the generator waits
        going_on = _await(_going_on(closer, waits_on))
        task = Task(going_on, shown, self.failures, line, next(self.numbers), self.ready)
        self.ready.append(task)

    def _warning(
        self, message: Any, category: Any, filename: str, lineno: int, *rest: Any, **more: Any
    ) -> None:
        """A warning, printed as CPython prints it but without the sandbox's own files (a
        coroutine never awaited is reported where the sandbox dropped it): the script's line
        when it is the script's."""
        line = lineno if filename == FILENAME else 0
        self._warn_once(line, getattr(category, "__name__", "Warning"), _message(message))

    def _unraisable(self, unraisable: Any) -> None:
        """What a finalizer raised, which Python ignores (CPython prints it with its
        traceback): one warning line at the script's line that raised it, once a run, without
        the sandbox's frames or an object's address (which differ from run to run). The
        script's own code it reads (a ``__str__``, a ``__qualname__``) may raise too: then the
        line says so, as a message that could not be made."""
        error = unraisable.exc_value
        try:
            name = getattr(unraisable.object, "__qualname__", None)
        except (MemoryError, _Ended):
            raise
        except BaseException:
            name = None
        if not isinstance(name, str):
            name = _type_name(unraisable.object)
        lines = _script_lines(error) if isinstance(error, BaseException) else []
        text = _message(error) if isinstance(error, BaseException) else ""
        message = f"an exception in {name} was ignored: {_type_name(error)}: {text}"
        self._warn_once(lines[0] if lines else 0, "Warning", message)

    def _warn_once(self, line: int, category: str, message: str) -> None:
        """Print a warning line, once a run (CPython's default for a warning)."""
        text = _warning_line(line, category, message)
        if text not in self.warned:
            self.warned.add(text)
            self.sink.write(text)

    def _let_go(self) -> None:
        """Drop what the script holds (its tasks), so the ending has room to be written.

        Only coroutines that never started are closed (closing one runs none of its code);
        the others go when nothing refers to them."""
        self.reserve = None  # also tells _close_dropped that no task runs again
        for task in self.ready:
            if inspect.getcoroutinestate(task._coro) == inspect.CORO_CREATED:
                task._coro.close()
        self.ready.clear()
        self.deferred_futures = []

    def _concluded(self, kind: str, payload: Any) -> Ran:
        if kind == "error" and _exited(payload):
            kind, payload = "value", None  # sys.exit(0): a program that ends well returns
        ran = self._value(payload) if kind == "value" else self._error(payload)
        # A script that did nothing at all: did it only define functions?
        nothing = kind == "value" and payload is None and not self.position
        if nothing and not self.printed.total_bytes and (never := self._never_called()):
            return self._finish(Ran(outcome="failed", error=never))
        if ran.limit is None or ran.limit.name != "memory":
            for line in self.main_guards:
                # A program's entry point, which the model meant to run: say it did not.
                self.printed.write(_warning_line(line, "RuntimeWarning", _MAIN_GUARD_NEVER_RUNS))
            if kind == "value" and payload is None and self.bare_ending is not None:
                line, warning = self.bare_ending
                self.printed.write(_warning_line(line, "RuntimeWarning", _well_formed(warning)))
            self._unretrieved()
        return self._finish(ran)

    def _unwritable_tool(self, text: str) -> str | None:
        """What to say of the line ``text``, which does not parse, when it writes a tool as
        an attribute that Python cannot read (``tools.class``, a keyword; ``tools.2fa_verify``
        of the tool ``_2fa_verify``), else None: Python's own words were "invalid syntax"."""
        for written in _TOOL_ATTRIBUTE.findall(text):
            if keyword.iskeyword(written) and written in self.tool_set:
                return unwritable_tool(written)
            if written[:1].isdigit() and "_" + written in self.tool_set:
                return unwritable_tool("_" + written, written)
        return None

    def _never_called(self) -> ScriptError | None:
        """Why a script that returned nothing, made no call and printed nothing failed when
        it only defines functions and calls none, so none of its code ran (its work in an
        ``async def main(args):`` never called), else None: each of its statements defines a
        function or a class, imports, or gives a name a value made without a call, and the
        last function's name is read nowhere outside it."""
        if "def" not in self.script.code:
            return None
        tree = ast.parse(self.script.code, filename=FILENAME)
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        guards = [n.lineno for n in tree.body if _is_main_guard(n)]
        if not functions or not all(_defines_only(n) or _is_main_guard(n) for n in tree.body):
            return None
        if guards:  # its block was to call them
            return ScriptError(
                name="RuntimeError", message=_MAIN_GUARD_NEVER_RUNS, lines=self._line_list(guards)
            )
        last = functions[-1]
        inside = {id(n) for n in ast.walk(last)}
        if any(
            isinstance(n, ast.Name) and n.id == last.name and id(n) not in inside
            for n in ast.walk(tree)
        ):
            return None  # handed on somewhere: not the case here
        parameters = last.args
        arguments = "..." if parameters.posonlyargs or parameters.args or parameters.vararg else ""
        awaited = "await " if isinstance(last, ast.AsyncFunctionDef) else ""
        message = never_called(last.name, f"return {awaited}{last.name}({arguments})")
        return ScriptError(
            name="RuntimeError", message=message, lines=self._line_list([last.lineno])
        )

    def _unretrieved(self) -> None:
        """A printed line for each call, task or gather that failed with nothing to take its
        error, in the order they failed (calls in call order), as asyncio's "Task exception
        was never retrieved". A call that succeeded gets none: it ran, as a task runs, whether
        or not anything awaited it (CPython's "coroutine was never awaited" is for work that
        never ran), and a call made only for its effect is no mistake. A script that uses
        such a call's result without ``await`` meets a TypeError saying so (_Future)."""
        failures = self.failures
        # At most UNRETRIEVED_SHOWN lines, the last saying how many more (900 failed calls
        # were 900 lines, the printed text cut down to make room for them).
        failed = [f for f in failures if f._error is not None]
        for number, future in enumerate(failed[:UNRETRIEVED_SHOWN], 1):
            error = future._error
            # Left out: one taken since the loop began (str() below may run the script's
            # code), and one the script made anew with __init__ (it has no error).
            if future not in failures or error is None:
                continue
            message = self.identities.text(_message(error))  # may run the script's __str__
            if type(future) is not _Call:  # a call's error is the tool's message
                message = f"{_type_name(error)}: {message}"
            shown = future._shown()
            if number == UNRETRIEVED_SHOWN and len(failed) > number:
                shown += f" (and {len(failed) - number} more like it)"
            self.printed.write(
                _warning_line(future._line, "RuntimeWarning", unawaited(shown, message))
            )

    def _finish(self, ran: Ran) -> Ran:
        error = ran.error
        if error is not None:
            # `raise ValueError(f"no {obj}")`: the error says no address, which differs from
            # run to run.
            error.message = self.identities.text(error.message)
        return super()._finish(ran)

    def _value(self, value: Any) -> Ran:
        if value is None:
            return _finished("u")
        if issubclass(type(value), str):
            # The text itself, whatever a subclass's len() says; `return str(obj)` writes
            # no address, which differs from run to run.
            value = self.identities.text(str.__str__(value))
        if type(value) is str and len(value) > VALUE_BOUND:
            half = VALUE_BOUND // 2
            text = _well_formed(value)
            return _finished("c" + jsontext.dumps([text[:half], text[-half:], len(text)]).decode())
        at: list[int] = []
        try:
            return _finished("j" + _json(value, "the returned value", self.identities, at))
        except (MemoryError, _Ended):
            raise
        except BaseException as e:
            if not isinstance(e, TypeError | _NotData) or _script_lines(e):
                return self._error(e)  # the value's own code raised (a dict's items())
            if at:
                # `a, b = await tools.x(...), tools.y(...)`: a call not awaited, whose
                # misuse says what to write, at the line that called it.
                message = str(e)
            elif isinstance(e, TypeError):
                message = f"{e}; return plainer data"
            else:
                message = f"the returned value {e}; return plainer data"
            return Ran(
                outcome="failed",
                error=ScriptError(name="TypeError", message=message, lines=self._line_list(at)),
            )

    def _near_name(self, error: BaseException, missing: str, builtins: bool = True) -> str | None:
        """The name CPython's traceback suggests for ``missing`` (not defined), if one is
        close: among the locals of the innermost script frame the error went through, then
        the script's top-level names (its body's frame, the outermost), then its builtins
        (only their names are read; not when ``builtins`` is false). Not the frames between:
        the failing line cannot see its callers' locals."""
        frames = _script_frames(error)
        frames = [frames[-1], frames[0]] if len(frames) > 1 else frames  # innermost first
        scope = self.module.__dict__
        held = scope.get("__builtins__")
        # As CPython looks: the frame's names, then the globals, then the builtins (here the
        # script's frames are its functions' and its body's, whose names are its globals).
        # Without the builtins, none of the names every script is given either: `{tool: 1}`
        # is JavaScript's object, not a typo of `tools`.
        for names in (
            *(list(frame.f_locals) for frame in frames),
            [n for n in scope if builtins or n not in _GIVEN_NAMES],
            list(held) if builtins and type(held) is dict else [],
        ):
            shown = [n for n in names if type(n) is str and n.isidentifier() and n[:2] != "__"]
            if (near := _suggestion(missing, shown)) is not None:
                return near
        return None

    def _in_class_annotation(self, error: BaseException, missing: str) -> bool:
        """Whether ``missing`` (not defined) is in the annotation of the line a class body
        failed on (``user: Get_user_User``), the innermost of the script's frames."""
        frame = _innermost(error)
        # A class body's code has no fast locals (a function's has: CO_OPTIMIZED).
        if frame is None or frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            return False
        line = frame.f_lineno
        if not 1 <= line <= len(self.script_lines):
            return False
        annotated = _ANNOTATED.match(self.script_lines[line - 1])
        return (
            annotated is not None
            and not keyword.iskeyword(annotated[1])
            and re.search(rf"\b{re.escape(missing)}\b", annotated[2]) is not None
        )

    def _unquoted_key(self, lines: list[int], missing: str) -> bool:
        """Whether the innermost of ``lines`` writes ``missing`` as a dict's key unquoted,
        as JavaScript writes an object's (``{query: "x"}``, ``..., limit: 5}``)."""
        if not lines or not 1 <= lines[0] <= len(self.script_lines):
            return False
        # At the line's start too: a JavaScript object written over several lines.
        key = rf"(?:^|[{{,])\s*{re.escape(missing)}\s*:(?!=)"
        return re.search(key, self.script_lines[lines[0] - 1]) is not None

    def _asyncio_run_at(self, lines: list[int]) -> str | None:
        """The function an ``asyncio.run(f(...))`` on the innermost of ``lines`` runs (``main``
        when not named), or None when that line runs none."""
        if not lines or not 1 <= lines[0] <= len(self.script_lines):
            return None
        found = _ASYNCIO_RUN.search(self.script_lines[lines[0] - 1])
        return None if found is None else (found[1] or "main")

    def _error(self, error: BaseException) -> Ran:
        lines = _script_lines(error)
        said = _ARGS.__get__(error) if type(error) is MemoryError else None
        if said is not None and (
            not said or (len(said) == 1 and type(said[0]) is str and said in _ALLOCATION_FAILED)
        ):
            # The interpreter's own (no text, or a C module's word for a failed allocation):
            # the heap's limit. One the script raised with a message of its own (`raise
            # MemoryError("cache full")`) is its error.
            message = self._memory_message()
            return Ran(
                outcome="failed",
                error=ScriptError(name="LimitError", message=message, lines=self._line_list(lines)),
                limit=LimitMet(name="memory", message=message),
            )
        name = _type_name(error)
        module = _TYPE_MODULE.__get__(type(error))
        if name in ("error", "Error") and type(module) is str and module not in (_MAIN, "builtins"):
            # A module's `error` says nothing alone ("error: unterminated character set"):
            # named as CPython's traceback names it, `re.error`.
            name = f"{module.lstrip('_')}.{name}"
        message = _message(error)
        if issubclass(type(error), BaseExceptionGroup):
            # A TaskGroup's: its own text only counts the errors ("(2 sub-exceptions)").
            leaves, count = _leaves(cast(BaseExceptionGroup[BaseException], error), _GROUP_SHOWN)
            # `assert x` in a task: its name alone, as an uncaught error with no text is said.
            said = [(_type_name(e), _message(e)) for e in leaves]
            shown = [f"{name}: {text}" if text else name for name, text in said]
            more = count - len(shown)
            message += ": " + "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
            lines = [n for leaf in leaves for n in _script_lines(leaf)] + lines
        limit = None
        if isinstance(error, LimitError | FileError) and message in self.limit_errors:
            limit = LimitMet(name=self.limit_errors[message], message=message)
        missing = error.name if type(error) is NameError else None
        if type(missing) is str and _declared_global(self.script.code, missing):
            message += (
                "; the script is the body of an async function, so its top-level names are "
                f"that function's: in a function inside it, write `nonlocal {missing}`, not "
                f"`global {missing}`"
            )
        elif type(error) is ImportError and (wanted := _CANNOT_IMPORT.fullmatch(message)):
            # CPython's text ends "(unknown location)" and says nothing of what there is.
            imported, module = wanted[1], wanted[2]
            message = f"cannot import name {imported!r} from {module!r}"
            if (module, imported) in _NEWER:
                newer = _NEWER[module, imported]
                message += (
                    f": it is new in Python {newer}, and scripts are Python "
                    f"{_VERSION[0]}.{_VERSION[1]}"
                )
            elif (module, imported) in _LEFT_OUT:
                message += _LEFT_OUT[module, imported]
            elif isinstance(found := self.modules.get(module), Module):
                near = closest_names(imported, list(found._names))
                message += f"; did you mean {', '.join(near)}?" if near else ""
        elif type(missing) is str and (hint := self.tool_hint(missing, "...")):
            message += hint
        elif type(missing) is str and missing in _WITHHELD:
            message += _WITHHELD[missing]
        elif missing == "asyncio" and (ran := self._asyncio_run_at(lines)) is not None:
            # `asyncio.run(main())` with no import, a program's ending: imported, it would
            # fail next (see the asyncio module's run), so both are said at once.
            message += (
                "; nor is asyncio.run() needed: a script is the body of an async function "
                f"already: in its place, write `return await {ran}(...)`"
            )
        elif type(missing) is str and missing in ALLOWED:
            # `await asyncio.gather(...)` with no import: CPython 3.12 says as much.
            message += f". Did you forget to import '{missing}'?"
        elif (
            type(missing) is str
            and (meant := self._near_name(error, missing, builtins=False)) is not None
        ):
            # `return reslt`: CPython's traceback says so; the text of the error does not.
            message += f". Did you mean: {meant!r}?"
        elif type(missing) is str and self._unquoted_key(lines, missing):
            # `tools.search({query: "x"})`: JavaScript's object, whose keys need no quotes. A
            # name close to one of the script's is a typo first (`{user_ud: 1}`), one close to
            # a builtin is not (`{limit: 5}` is no `list`).
            message += (
                f"; a dict's keys are quoted in Python, {{'{missing}': ...}} (or a tool is "
                f"given keywords, tools.name({missing}=...))"
            )
        elif type(missing) is str and (meant := self._near_name(error, missing)) is not None:
            message += f". Did you mean: {meant!r}?"
        elif type(missing) is str and self._in_class_annotation(error, missing):
            # `user: Get_user_User` in a dataclass: a type of the declarations, which the
            # type check knows and the run has not (a function's annotations are not run).
            message += (
                "; a class body's annotations are evaluated when the class is made "
                "(dataclasses reads them): write `from __future__ import annotations` as the "
                "script's first line, which keeps them as text, or annotate with a type the "
                "script has (dict, Any)"
            )
        elif (
            type(error) is AttributeError
            and type(key := _ATTRIBUTE_NAME.__get__(error)) is str
            and (python := _javascripts(_ATTRIBUTE_OBJ.__get__(error), key)) is not None
        ):
            # `rows.length`, `e.message`: a model that writes both languages.
            message += f"; that is JavaScript's: Python writes {python}"
        elif (
            type(error) is AttributeError
            and type(held := _ATTRIBUTE_OBJ.__get__(error)) in (dict, list)
            and type(key := _ATTRIBUTE_NAME.__get__(error)) is str
            and key in _RESPONSE_ATTRIBUTES
            # Only a dict's keys are looked in: `in` of a list runs its items' __eq__.
            and (type(held) is list or key not in held)
        ):
            # `r.json()`, `r.status_code` of a tool's result, as of an HTTP library's response
            # (`r.data` of a dict that has the key "data" is said below).
            message += (
                "; a tool's result is data already (the dict or list the tool gave), not an HTTP "
                "response: use it as it is, as r['key'] or r[0]"
            )
        elif (
            type(error) is AttributeError
            and type(_ATTRIBUTE_OBJ.__get__(error)) in _PLAIN_TYPES
            and type(key := _ATTRIBUTE_NAME.__get__(error)) is str
            and (meant := _near_attribute(type(_ATTRIBUTE_OBJ.__get__(error)), key)) is not None
        ):
            # `text.uper()`, `d.itms()`: as CPython's traceback says it.
            message += f". Did you mean: {meant!r}?"
        elif (type(error) is AttributeError and "'coroutine' object" in message) or (
            type(error) is TypeError and _COROUTINE_NAMED.search(message)
        ):
            # `[fetch(i) for i in ids]` used as results (`sum(...)` of them, `x + 1`):
            # Python's text names no await.
            message += (
                "; calling an async function (the script's, or files.text and files.sheets) "
                "gives a coroutine, not its result: await it (`await fetch(x)`, `await "
                "files.text(id)`), or several at once with `await asyncio.gather(*coroutines)`"
            )
        elif type(error) is TypeError and (awaited := _NOT_AWAITABLE.fullmatch(message)):
            # `await x` of what a call already gave, `await asyncio.sleep` uncalled: CPython
            # names the type, not what is awaited.
            if awaited[1] in ("function", "builtin_function_or_method", "method"):
                message += "; a function is called, and what it gives awaited: `await f(...)`"
            elif awaited[1] == "Tools":
                message += "; tools holds the tools: await a call of one, `await tools.name(...)`"
            elif (entered := _ASYNC_ONLY_NAMED.get(awaited[1])) is not None:
                message += f"; {entered[0]} is not awaited but entered: `async with {entered[1]}:`"
            elif awaited[1] in _SEVERAL:
                # `await [tools.a(...), tools.b(...)]`: JavaScript's Promise.all, written bare
                # (or a gather's list of results awaited again).
                message += (
                    f"; await takes one tool call, task or coroutine, not a {awaited[1]}: await "
                    "several at once with `await asyncio.gather(*calls)` (`import asyncio`), "
                    "whose result, the list of theirs, is not awaited again"
                )
            else:
                message += (
                    "; await takes a tool call, a task or a coroutine, once: what an await "
                    "gave is the result itself (`x = await tools.name(...)`, then use x)"
                )
        elif type(error) is TypeError and _FUTURE_NAMED.search(message):
            # A call not awaited where CPython's own check met it (`tools.name(...)()`,
            # `", ".join([tools.name(...)])`): its text names the type, not the fix.
            message += (
                "; a tool call, tools.name(...), gives a Future to await, not its result: "
                "write `await tools.name(...)` and use what it gives"
            )
        elif (
            type(error) is KeyError and type(held := _subscripted(error, self.script_lines)) is dict
        ):
            # `r["nmae"]` of a tool's result: its keys, so the model need not guess them.
            message += _keys_had(held, error)
        elif (
            type(error) is TypeError
            and (unsubscripted := _NOT_SUBSCRIPTABLE.fullmatch(message)) is not None
            and (failing := _failed_subscript(error, self.script_lines)) is not None
            and not isinstance(failing[0].value, ast.Constant)
            and 0 < len(written := failing[2]) <= 80
            and "\n" not in written
        ):
            # `r["name"]` of what is no dict (None, a number, a tool's text) in a line of
            # several subscripts: which one it was, as CPython's carets show it.
            if unsubscripted[1] is not None:  # "'NoneType' object is not subscriptable"
                kind = unsubscripted[1]
                message += f"; {written} is {'None' if kind == 'NoneType' else with_article(kind)}"
            else:  # "string indices must be integers, not 'str'"
                message += (
                    f"; {written} is text, not a dict or a list: if it holds JSON, read it "
                    f"with json.loads({written})"
                )
        elif (
            type(error) is AttributeError
            and message.startswith("'NoneType' object has no attribute ")
            and (failing := _failed_subscript(error, self.script_lines, ast.Attribute))
            and 0 < len(written := failing[2]) <= 80
            and "\n" not in written
        ):
            # `user.get("name")` where a line has several attributes: which met None.
            message += f"; {written} is None"
        elif (
            type(error) is IndexError
            and type(held := _subscripted(error, self.script_lines)) is list
        ):
            # `rows[9]` of a tool's result: how many there are.
            count = len(held)
            plural = "" if count == 1 else "s"
            message += f"; the list has {count:,} item{plural}" if count else "; the list is empty"
        elif (
            type(error) is AttributeError
            and type(held := _ATTRIBUTE_OBJ.__get__(error)) is dict
            and type(key := _ATTRIBUTE_NAME.__get__(error)) is str
            and key in held
        ):
            # `r.name` of a tool's result, as JavaScript reads it.
            message += f"; {key!r} is a key of the dict: read it as d[{key!r}], not d.{key}"
        elif type(error) is decimal.InvalidOperation and message == _NOT_A_DECIMAL:
            # `Decimal(row["price"])` of "N/A" or "" from a tool: C decimal's text is a class.
            message = "Decimal(...) was given text that is not a number (ConversionSyntax)"
        elif type(error) is TypeError and (data := _ASYNC_FOR_DATA.fullmatch(message)):
            # `async for r in await tools.list_prs(...)`: the result is a list, read at once.
            message += (
                f"; a {data[1]} is data already, not an async iterator: loop over it with a "
                "plain `for x in ...`"
            )
        elif type(error) is TypeError and message == "'async_generator' object is not iterable":
            # `sum(await tools.price(sku=s) for s in skus)`: in an async function, a
            # generator expression that awaits is an async generator, which no builtin reads.
            message += (
                "; an async generator is read with `async for`, and a generator expression "
                "that awaits is one: write a list, `sum([await f(x) for x in xs])`, or gather "
                "the calls with `await asyncio.gather(*(f(x) for x in xs))`"
            )
        elif (
            type(error) is RuntimeError
            and message.endswith(" raised StopIteration")
            and type(cause := _CAUSE.__get__(error)) is StopIteration
        ):
            # `next(o for o in orders if ...)` with no match: PEP 479 turns the StopIteration
            # into this where the coroutine or generator ends, so its own lines are outside
            # the script (none at all for the script's body); the cause's are where it was.
            message += (
                ": an iterator had nothing left, as next() of an empty one raises: give next() "
                "a default, `next(it, None)`, and test for it"
            )
            inner = _script_lines(cause)
            # A generator's frame is in both, as the innermost of the RuntimeError's.
            shared = bool(lines and inner and lines[0] == inner[-1])
            lines = inner + lines[shared:]
        elif type(error) is UnboundLocalError:
            local = _UNBOUND.search(message)
            if local is not None and _assigned_at_top(self.script.code, local[1]):
                # `count += 1` in a function, as at a module's top level; there it is
                # `global count`, here the script's names are its function's.
                message += (
                    f"; {local[1]} is also a top-level name of the script, which is the body of "
                    f"an async function: to change it in a function inside it, write "
                    f"`nonlocal {local[1]}` there (not `global`)"
                )
        if limit is None:
            message += _chained(error) + "".join(f"\n{note}" for note in _notes(error))
        return Ran(
            outcome="failed",
            error=ScriptError(
                name=_cut(_well_formed(name), ERROR_NAME_BOUND),
                message=_cut(_well_formed(message), ERROR_MESSAGE_BOUND),
                lines=self._line_list(lines),
            ),
            limit=limit,
        )

    def _stuck_lines(self) -> list[ErrorLine]:
        # Down the chain of what the script's body awaits, through coroutines and generators
        # only (anything else may be the script's own object, whose attributes run its code).
        lines: list[int] = []
        awaited: Any = self.main._coro if self.main is not None else None
        while type(awaited) is types.CoroutineType or type(awaited) is types.GeneratorType:
            if type(awaited) is types.CoroutineType:
                frame, awaited = awaited.cr_frame, awaited.cr_await
            else:
                frame, awaited = awaited.gi_frame, awaited.gi_yieldfrom
            if frame is not None and frame.f_code.co_filename == FILENAME:
                lines.append(frame.f_lineno)
        lines.reverse()
        return self._line_list(lines)

    def stop_lines(self, frame: types.FrameType | None) -> list[ErrorLine]:
        # Down the frames the stop came in, the script's own only (not a library's it called).
        lines: list[int] = []
        while frame is not None:
            if frame.f_code.co_filename == FILENAME:
                lines.append(frame.f_lineno)
            frame = frame.f_back
        return self._line_list(lines)

    def _line_list(self, numbers: list[int]) -> list[ErrorLine]:
        lines: list[ErrorLine] = []
        for number in numbers:
            if 1 <= number <= len(self.script_lines) and all(x.line != number for x in lines):
                lines.append(ErrorLine(line=number, text=self.script_lines[number - 1][:300]))
            if len(lines) >= 8:
                break
        return lines


# The modules a model reaches for the network or the system with, and others it imports out
# of habit: an import of one says what a script has instead (before the list of the modules
# it may import). Each is formatted with the scripts' Python as {release}.
_NOT_HERE = {
    **dict.fromkeys(
        (
            "requests", "urllib", "urllib3", "http", "httpx", "aiohttp", "socket", "ssl",
            "smtplib", "ftplib", "websocket", "websockets",
        ),
        ": a script has no network, and reaches the host through `tools` (await "
        'tools.name(...); find them with await tools.tool_search(query="..."))',
    ),
    **dict.fromkeys(
        (
            "os", "pathlib", "shutil", "subprocess", "glob", "tempfile", "signal", "sqlite3",
        ),
        ": a script has no file system, environment or processes; it reads the files it was "
        "given with `await files.text(id)` (`files.list()` lists them)",
    ),
    **dict.fromkeys(
        ("threading", "multiprocessing", "concurrent", "queue"),
        ": a script has no threads or processes; it runs calls at once with asyncio "
        "(`await asyncio.gather(*(tools.name(...) for ...))`, asyncio.Queue, asyncio.TaskGroup)",
    ),
    "secrets": (
        ": a script is replayed, so its randomness is drawn from its seed and is no secret "
        "(`random` and `uuid.uuid4` give values that repeat on every run); ask a tool for "
        "secrets"
    ),
    "zoneinfo": (
        ": a script has no time zone database; its clock is UTC, and a fixed offset is "
        "datetime.timezone(datetime.timedelta(hours=-5))"
    ),
    # The declarations' TypedDict and NotRequired, which models import from here.
    "typing_extensions": (
        ": scripts are Python {release}, whose typing has what it adds up to {release} "
        "(TypedDict, NotRequired, Required, Self, Literal...): import them from typing"
    ),
}  # fmt: skip

# What a model imports that every script has without an import: `from tools import x`.
_GIVEN = {
    "tools": (
        ": `tools` is a name every script has, with no import: call a tool as "
        "`await tools.name(key=value)`"
    ),
    "files": (
        ": `files` is a name every script has, with no import: `files.list()` lists the "
        "files it was given, `await files.text(id)` reads one"
    ),
}

# The builtins a script does not have that a model reaches for, and JavaScript's names a model
# writes in Python: an uncaught NameError for one says what the script has instead.
_NO_CODE = "; a script cannot run code it makes: write the code in the script"
_WITHHELD = {
    "open": (
        "; a script has no file system: read the files it was given with "
        "`await files.text(id)` or the streams (`files.list()` lists them), and hand text "
        "back by returning it or printing it"
    ),
    "input": "; a script takes no input: it reaches the host through `tools`",
    "breakpoint": (
        "; a script runs unattended, with no debugger: print the values to look at "
        "(`print(x)`), which the run's output shows"
    ),
    "help": (
        "; a script has no help(): find tools and what they take with "
        '`await tools.tool_search(query="...")`, and print what a value has with print(dir(x))'
    ),
    "vars": (
        "; a script reads an object's attributes by name (`obj.x`, `getattr(obj, name)`), "
        "and a dataclass's as a dict with dataclasses.asdict(obj)"
    ),
    **dict.fromkeys(
        ("exit", "quit"),
        "; a script ends with `return value`, or as a program does, with `sys.exit(status)` "
        "(`import sys`)",
    ),
    **dict.fromkeys(("eval", "exec", "compile"), _NO_CODE),
    "console": "; console.log is JavaScript's: a Python script prints with print(...)",
    **dict.fromkeys(
        ("true", "false", "null", "undefined"),
        "; Python writes True, False and None (JavaScript's true, false, null)",
    ),
    "JSON": (
        "; JSON is JavaScript's: a Python script writes `import json`, then json.dumps(value) "
        "and json.loads(text)"
    ),
    "Math": "; Math is JavaScript's: a Python script writes `import math` (math.floor(x)), and "
    "max(), min(), abs() and round() are builtins",
    "Promise": (
        "; Promise is JavaScript's: a Python script awaits calls at once with `import "
        "asyncio`, then `await asyncio.gather(*calls)`"
    ),
}


# CPython's ImportError for a name a module (a script's Module) has not.
_CANNOT_IMPORT = re.compile(r"cannot import name '(\w+)' from '([\w.]+)' \(unknown location\)")
# Names of allowed modules that newer Pythons have: models write them.
_NEWER = {
    ("itertools", "batched"): "3.12",
    ("typing", "override"): "3.12",
    ("typing", "TypeAliasType"): "3.12",
    ("math", "sumprod"): "3.12",
    ("statistics", "kde"): "3.13",
    ("copy", "replace"): "3.13",
}


# Names of allowed modules that scripts do not have, on purpose, and what to write instead.
_LEFT_OUT = {
    **dict.fromkeys(
        (("functools", "singledispatch"), ("functools", "singledispatchmethod")),
        ": it is left out of scripts (it reads annotations as code); choose by type with "
        "isinstance, or a dict of functions by type",
    ),
    ("enum", "global_enum"): ": it is left out of scripts (it writes into a module)",
    **dict.fromkeys(
        (("enum", "pickle_by_enum_name"), ("enum", "pickle_by_global_name")),
        ": it is left out of scripts (it is for pickle, which scripts have not)",
    ),
}


# How many lines a run's failures nothing took (calls, tasks, gathers) get at most.
UNRETRIEVED_SHOWN = 10


# The thread the garbage collector is collecting on now, if any: the finalizers it runs run
# there (in a sandbox process, the only thread; where scripts run in the host's process, a
# script on another thread is not in them, though it may run while a finalizer waits).
_collecting_on: int | None = None


def _on_collect(phase: str, _info: dict[str, int]) -> None:
    global _collecting_on
    _collecting_on = _thread.get_ident() if phase == "start" else None


gc.callbacks.append(_on_collect)


def _warning_line(line: int, category: str, message: str) -> str:
    """``warning_line``, well formed (a script's own text may hold lone surrogates)."""
    return _well_formed(warning_line(line, category, message))


# The names every script is given besides the builtins (see Run's scope).
_GIVEN_NAMES = frozenset({"tools", "files", "ToolError", "LimitError", "FileError"})
_UNBOUND = re.compile(r"^cannot access local variable '(\w+)'")
# CPython's advice on an int of over 4,300 digits names what a script's sys has not.
_INT_DIGITS = "; use sys.set_int_max_str_digits() to increase the limit"
# CPython's TypeError naming a type as its operand's, the ways its messages do ("'X' object is
# not callable", "for +: 'int' and 'X'", "expected str instance, X found", "not X").
_NAMED_AS_OPERAND = r"'{0}'|\b{0} found|\bnot {0}\b|\(not \"{0}\"\)"
# CPython's refusal of `await x` of what is not awaitable; the type's name.
_NOT_AWAITABLE = re.compile(r"object (\w+) can't be used in 'await' expression")
# What an HTTP library's response has, which a model reads on a tool's result.
_RESPONSE_ATTRIBUTES = frozenset(
    ("json", "text", "content", "status_code", "raise_for_status", "ok", "body", "data")
)
# `async for` of plain data, and its type.
_ASYNC_FOR_DATA = re.compile(
    r"'async for' requires an object with __aiter__ method, got (list|dict|tuple|str|set)"
)
# A line that annotates a name (`user: Get_user_User = None`): the name, and the annotation.
_ANNOTATED = re.compile(r"\s*([A-Za-z_]\w*)\s*:(?!=)([^=#]*)")
# What holds several awaitables, which a script awaits as if it were one.
_SEVERAL = frozenset(("list", "tuple", "generator", "map", "set", "dict"))
# A Future (a call not awaited, see _Call) so named.
_FUTURE_NAMED = re.compile(_NAMED_AS_OPERAND.format("Future"))
_COROUTINE_NAMED = re.compile(_NAMED_AS_OPERAND.format("coroutine"))
_NOT_A_DECIMAL = "[<class 'decimal.ConversionSyntax'>]"


def _script_frames(error: BaseException) -> list[types.FrameType]:
    """The script's frames ``error`` went through, the outermost first."""
    tb, frames = _TRACEBACK.__get__(error), []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == FILENAME:
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _innermost(error: BaseException) -> types.FrameType | None:
    """The innermost of the script's frames ``error`` went through, if any."""
    frames = _script_frames(error)
    return frames[-1] if frames else None


def _assigned_at_top(code: str, name: str) -> bool:
    """True when a line of ``code`` at its top level assigns ``name`` (``name = ...``)."""
    pattern = rf"^{re.escape(name)}\s*(?::[^=\n]*)?(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=)"
    return re.search(pattern, code, re.MULTILINE) is not None


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names the script's top level binds (its functions' and classes' own aside)."""
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            pending.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return names


def _check_globals(tree: ast.Module) -> None:
    """Refuse ``global NAME`` for a name the script's top level binds: the script is the
    body of an async function, so that name is the function's, and the ``global`` one
    another (a write to it changed nothing the script then read: it returned the old
    value without a word)."""
    top = _top_level_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            for name in node.names:
                if name in top:
                    raise Refused(
                        node.lineno,
                        f"`global {name}` names none of the script's: the script is the body "
                        f"of an async function, so its top-level names are that function's; "
                        f"in a function inside it, write `nonlocal {name}`",
                    )


def _declared_global(code: str, name: str) -> bool:
    """True when a ``global`` statement of ``code`` names ``name``."""
    pattern = rf"^[ \t]*global\b[^\n#]*\b{re.escape(name)}\b"
    return re.search(pattern, code, re.MULTILINE) is not None


# The errors of an uncaught ExceptionGroup the run's error names.
_GROUP_SHOWN = 3


_CAUSE = BaseException.__dict__["__cause__"]
_CONTEXT = BaseException.__dict__["__context__"]
_SUPPRESS_CONTEXT = BaseException.__dict__["__suppress_context__"]


def _chained(error: BaseException) -> str:
    """What ``error`` was raised from, as CPython's traceback says it (the error a tool call
    raised, wrapped by ``raise ValueError(...) from e``, or raised in its ``except``), in a
    few words; "" for none, for ``from None``, and for an error the script's code did not
    raise (the sandbox's own, handled where the script never was)."""
    cause = _CAUSE.__get__(error)
    if cause is not None:
        said = "caused by"
    else:
        cause = _CONTEXT.__get__(error)
        if cause is None or _SUPPRESS_CONTEXT.__get__(error) or not _script_lines(cause):
            return ""
        said = "raised while handling"
    text = _message(cause)
    return f" ({said} {_type_name(cause)}{': ' + text if text else ''})"


# What traceback writes between chained errors, as CPython's does; how many it writes at most
# (a loop that re-raises while handling makes a long chain), and how often a frame repeated
# in a row (recursion) is written before it is counted.
_DIRECT_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_DURING = "\nDuring handling of the above exception, another exception occurred:\n\n"
_CHAIN_SHOWN = 8
_REPEATS_SHOWN = 3
_NO_VALUE = object()  # traceback.format_exception's `value` not given


_NO_EXCEPTION = (
    "NoneType: None\n"  # what traceback writes of no exception (format_exc outside an except)
)


def _exited(error: Any) -> bool:
    """Whether ``error`` is a ``sys.exit()`` of a program that ended well (a status of 0 or
    none), which CPython takes as success. By the status's type first: the script's own
    object's ``__eq__`` does not run here (it could raise, or say anything)."""
    if not issubclass(type(error), SystemExit):
        return False
    args = _ARGS.__get__(error)
    if not args:
        return True
    status = args[0]
    return len(args) == 1 and (status is None or (type(status) in (int, bool) and status == 0))


def _exception_given(exc: Any, value: Any) -> BaseException | None:
    """The exception a traceback function was given: ``exc``, or ``value`` in the form of
    before 3.10; a TypeError for what is none."""
    error = exc if value is _NO_VALUE else value
    if error is not None and not issubclass(type(error), BaseException):
        raise TypeError(f"traceback takes an exception, not {_type_name(error)}")
    return error


def _limit(limit: Any) -> int | None:
    if limit is None:
        return None
    if type(limit) is not int:
        raise TypeError(f"limit must be an integer or None, not {_type_name(limit)}")
    return limit


def _repeated(count: int) -> str:
    return f"  [Previous line repeated {count} more time{'s' if count > 1 else ''}]\n"


def _exception_line(error: BaseException) -> str:
    """The last lines traceback writes of an error: its type and message, and its notes, as
    CPython's."""
    text = _message(error)
    line = f"{_type_name(error)}: {text}\n" if text else f"{_type_name(error)}\n"
    return line + "".join(f"{note}\n" for note in _notes(error))


_EXCEPTION_DICT = BaseException.__dict__["__dict__"]
_NOTES_SHOWN = 10


def _notes(error: BaseException) -> list[str]:
    """The notes ``error.add_note()`` gave it (the first few; text only, read without running
    the script's code), which CPython's traceback writes after its message."""
    held = _EXCEPTION_DICT.__get__(error).get("__notes__")
    if type(held) is not list:
        return []
    return [_cut(note, 1000) for note in held[:_NOTES_SHOWN] if type(note) is str]


# The types whose attributes a "Did you mean" of a misspelt one is looked for in (their names
# are the type's, fixed: dir() runs no code of the script's).
_PLAIN_TYPES = frozenset(
    {str, bytes, bytearray, list, dict, tuple, set, frozenset, int, float, complex, bool}
)
# CPython's bounds for a "Did you mean" (Python/suggestions.c): the most names looked among,
# the longest name compared, and the cost of a letter moved (of a change of its case: 1).
_NEAR_CANDIDATES = 750
_NEAR_LENGTH = 40
_MOVE_COST = 2


# JavaScript's names of what Python's plain types do, and how Python writes each.
_JAVASCRIPT_ATTRIBUTES = {
    "length": "len(x)",
    "push": "x.append(item)",
    "forEach": "a loop, `for item in x:`",
    "includes": "`item in x`",
    "indexOf": "x.index(item) (for text, x.find(part))",
    "toUpperCase": "x.upper()",
    "toLowerCase": "x.lower()",
    "trim": "x.strip()",
    "toString": "str(x)",
    "map": "[f(item) for item in x]",
    "filter": "[item for item in x if ...]",
}


def _javascripts(obj: Any, name: str) -> str | None:
    """How Python writes what ``obj.name`` is in JavaScript (``rows.length``, ``e.message``),
    for a plain value or an error; else None."""
    if name == "message" and issubclass(type(obj), BaseException):
        return "str(e) for an error's message"
    return _JAVASCRIPT_ATTRIBUTES.get(name) if type(obj) in _PLAIN_TYPES else None


def _near_attribute(kind: type, name: str) -> str | None:
    """The public attribute of ``kind`` closest to ``name``, if one is close."""
    return _suggestion(name, [a for a in dir(kind) if not a.startswith("_")])


def _suggestion(wrong: str, names: list[str]) -> str | None:
    """The name CPython's traceback suggests for ``wrong`` among ``names`` ("Did you mean:
    'result'?"), by its rule (3.11's traceback module's, which traceback.print_exc() uses):
    the fewest edits, within a bound that grows with the lengths.
    None when there is none, or too many names to look among, as CPython."""
    if len(names) > _NEAR_CANDIDATES or len(wrong) > _NEAR_LENGTH:
        return None
    best, found = len(wrong), None
    for name in names:
        if name == wrong:
            continue
        bound = min((len(name) + len(wrong) + 3) * _MOVE_COST // 6, best - 1)
        distance = _edits(wrong, name, bound)
        if distance <= bound and (found is None or distance < best):
            best, found = distance, name
    return found


def _edits(a: str, b: str, bound: int) -> int:
    """The cost of editing ``a`` into ``b`` (a letter moved 2, a letter's case 1), or more
    than ``bound`` once it is sure to be: CPython's levenshtein_distance."""
    if a == b:
        return 0
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    a, b = a[start:], b[start:]
    while a and b and a[-1] == b[-1]:
        a, b = a[:-1], b[:-1]
    if not a or not b:
        return _MOVE_COST * (len(a) + len(b))
    if len(a) > _NEAR_LENGTH or len(b) > _NEAR_LENGTH:
        return bound + 1
    if len(b) < len(a):
        a, b = b, a
    if (len(b) - len(a)) * _MOVE_COST > bound:
        return bound + 1
    row = list(range(_MOVE_COST, _MOVE_COST * (len(a) + 1), _MOVE_COST))
    result = 0
    for b_index, b_char in enumerate(b):
        distance = result = b_index * _MOVE_COST
        lowest = sys.maxsize
        for index, a_char in enumerate(a):
            change = 0 if a_char == b_char else 1 if a_char.lower() == b_char.lower() else 2
            substitute = distance + change
            distance = row[index]
            result = min(min(result, distance) + _MOVE_COST, substitute)
            row[index] = result
            lowest = min(lowest, result)
        if lowest > bound:
            return bound + 1
    return result


def _message(error: BaseException) -> str:
    """``str(error)``; when that raises (the script's own ``__str__``, or an argument that
    has no text, as an int past the digits Python writes), why the text could not be made."""
    try:
        text = str(error)
    except (MemoryError, _Ended):
        raise
    except BaseException as e:
        return _unreadable(e)
    if type(error) is ValueError and text.endswith(_INT_DIGITS):
        # CPython's advice names what a script's sys has not.
        text = text.removesuffix(_INT_DIGITS) + (
            "; a script cannot raise the limit (its sys has no set_int_max_str_digits): keep "
            "such a number as text, or write it with hex(value)"
        )
    return text


def _unreadable(failure: BaseException) -> str:
    """What an error's message says when ``str()`` of it raised ``failure``, read without
    running the script's code (its args, not its ``__str__``)."""
    args = _ARGS.__get__(failure)
    said = args[0] if len(args) == 1 and type(args[0]) is str else ""
    if type(failure) is ValueError and said.endswith(_INT_DIGITS):
        return (
            "its message could not be made: it holds an integer of more than "
            f"{sys.get_int_max_str_digits():,} digits, which Python does not write as text; "
            "give the error a shorter message (the number's digit count, or hex(value))"
        )
    said = said.partition("\n")[0][:200]  # a clause in one line
    why = f"{_type_name(failure)}: {said}" if said else _type_name(failure)
    return f"its message could not be made: str() of it raised {why}"


def _leaves(group: BaseExceptionGroup[BaseException], keep: int) -> tuple[list[BaseException], int]:
    """The first ``keep`` errors of ``group`` and of the groups in it, in order, and how many
    there are in all."""
    found: list[BaseException] = []
    count = 0
    todo: list[Iterator[BaseException]] = [iter((group,))]
    while todo:
        error = next(todo[-1], None)
        if error is None:
            todo.pop()
        elif issubclass(type(error), BaseExceptionGroup):
            todo.append(iter(BaseExceptionGroup.__dict__["exceptions"].__get__(error)))
        else:
            count += 1
            if len(found) < keep:
                found.append(error)
    return found, count


_KEYS_SHOWN = 10  # of a dict a KeyError's message lists the keys of


def _subscripted(error: BaseException, lines: list[str]) -> Any:
    """The dict or list whose subscript in the script raised ``error`` (``r["nmae"]``,
    ``r["a"][i]["b"]``, ``rows[9]``), or None. It is found again from the subscript's text
    and the frame's names, reading plain dicts and lists only: no code of the script's runs."""
    found = _failed_subscript(error, lines)
    return None if found is None else _read_plainly(found[0].value, found[1])


# CPython's TypeError of a subscript of what takes none (its type's name), or of text by a
# key (a tool's JSON text read as a dict).
_NOT_SUBSCRIPTABLE = re.compile(
    r"'(\w+)' object is not subscriptable|string indices must be integers, not 'str'"
)


def _failed_subscript(
    error: BaseException,
    lines: list[str],
    kind: type[ast.Subscript | ast.Attribute] = ast.Subscript,
) -> tuple[Any, dict[str, Any], str] | None:
    """The subscript (or attribute, of ``kind``) of the script's, as parsed from its text,
    whose evaluation raised ``error``, its frame's local names and the script's text of what
    it subscripts; None when ``error`` was raised elsewhere."""
    tb = _TRACEBACK.__get__(error)
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code.co_filename != FILENAME or tb.tb_lasti < 0:
        return None  # raised in code that is not the script's (a library's)
    frame = tb.tb_frame
    where = next(itertools.islice(frame.f_code.co_positions(), tb.tb_lasti // 2, None), None)
    if where is None or None in where or where[0] != where[1] or not 1 <= where[0] <= len(lines):
        return None
    line, _, start, end = where
    text = lines[line - 1].encode()[start:end].decode()
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):  # a span that is no expression of its own
        return None
    if not isinstance(node, kind):
        return None
    return node, frame.f_locals, ast.get_source_segment(text, node.value) or ""


def _keys_had(held: dict[Any, Any], error: BaseException) -> str:
    """``; the dict has 3 keys: 'id', 'name', 'tags'`` (the first few) and the closest to
    the key ``error`` is of; "" for a dict with keys the script's repr could say."""
    keys = list(itertools.islice(dict.__iter__(held), 1000))
    if not all(type(k) in (str, int) for k in keys):
        return ""
    if not keys:
        return "; the dict is empty"
    shown = keys[:_KEYS_SHOWN]
    more = len(held) - len(shown)
    said = ", ".join(_cut(repr(k), 60) for k in shown) + (f" and {more:,} more" if more else "")
    count = f"{len(held):,} key" + ("s" if len(held) > 1 else "")
    missing = _ARGS.__get__(error)
    near = []
    if len(missing) == 1 and type(missing[0]) is str:
        near = closest_names(missing[0], [k for k in keys if type(k) is str], n=1)
    return f"; the dict has {count}: {said}" + (f"; did you mean {near[0]!r}?" if near else "")


def _read_plainly(node: ast.expr, names: dict[str, Any]) -> Any:
    """What ``node`` (a name, or subscripts of one by a constant or a name) holds in
    ``names``, going through plain dicts and lists only; None when it is anything else."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if not isinstance(node, ast.Subscript):
        return None
    held = _read_plainly(node.value, names)
    index = node.slice
    key = index.value if isinstance(index, ast.Constant) else _read_plainly(index, names)
    if type(held) is dict and type(key) in (str, int):
        return dict.get(held, key)
    if type(held) is list and type(key) is int and -len(held) <= key < len(held):
        return list.__getitem__(held, key)
    return None


def _script_lines(error: BaseException) -> list[int]:
    """The script's lines in ``error``'s traceback, innermost first (as a JavaScript
    stack)."""
    lines: list[int] = []
    tb = _TRACEBACK.__get__(error)  # the real one: a script's class may make it a property
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == FILENAME:
            lines.append(tb.tb_lineno)
        tb = tb.tb_next
    lines.reverse()
    return lines


def warm_up_code() -> str:
    """A script that takes every path a run takes, so nothing loads after lockdown."""
    return (
        "import " + ", ".join(ALLOWED) + "\n"
        "r = await tools.t(a=1)\n"
        "x, y = await asyncio.gather(tools.t({'a': 2}), asyncio.sleep(0), return_exceptions=True)\n"
        "print('x', {'a': [1]}, end='\\n')\n"
        "pprint.pprint({'a': 1})\n"
        "try:\n    None.x\nexcept AttributeError as e:\n    pass\n"
        "'{0} {n:>3}'.format(1, n=2); '{a}'.format_map({'a': 1})\n"
        "datetime.datetime.now(); datetime.date.today(); datetime.datetime.strptime('2020', '%Y')\n"
        "time.time(); time.strftime('%Y'); time.strptime('2020', '%Y'); random.random()\n"
        "uuid.uuid4(); uuid.uuid5(uuid.NAMESPACE_DNS, 'x')\n"
        "urllib.parse.urlsplit('http://[::1]:8/p?q=1#f').port\n"
        "urllib.parse.parse_qs('a=1&b=%20'); urllib.parse.urlencode({'a': 'b c'})\n"
        "urllib.parse.quote('é/x'); urllib.parse.unquote('%C3%A9')\n"
        "[hashlib.new(n, b'x').digest(8) if n.startswith('shake')"
        " else hashlib.new(n, b'x').hexdigest() for n in sorted(hashlib.algorithms_guaranteed)]\n"
        "[('x').encode(c).decode(c) for c in ('utf-8', 'utf-16', 'utf-32', 'latin-1', 'ascii',"
        " 'cp1252', 'utf-8-sig', 'utf-16-le', 'utf-16-be', 'unicode_escape',"
        " 'raw_unicode_escape')]\n"
        "statistics.mean([1, 2]); statistics.median([1, 2]); fractions.Fraction(1, 3)\n"
        "decimal.Decimal('1.5') + 1; json.dumps({'a': 1}, indent=2); json.loads('[1]')\n"
        "re.sub(r'(a)', r'\\1', 'a'); csv.DictReader(io.StringIO('a\\n1'))\n"
        "list(csv.reader(io.StringIO('a,b\\n1,2'))); difflib.get_close_matches('a', ['ab'])\n"
        "textwrap.dedent(' a'); textwrap.fill('a b'); unicodedata.normalize('NFC', 'a')\n"
        "base64.b64encode(b'x'); collections.Counter('ab').most_common(1); copy.deepcopy([1])\n"
        "@dataclasses.dataclass\nclass P:\n    a: int = 1\n"
        "class E(enum.Enum):\n    A = 1\n"
        "dataclasses.asdict(P()); E.A.name; typing.cast(int, 1)\n"
        "async def rows():\n"
        "    out = []\n"
        "    async for row in files.csv('w.csv', limit=5):\n        out.append(row)\n"
        "    async for line in files.lines('w.csv'):\n        break\n"
        "    files.list(); files.stat('w.csv'); await files.text('w.csv'); files.show('w.csv')\n"
        "    try:\n        files.stat('nope')\n    except Exception:\n        pass\n"
        "    return out\n"
        "await rows()\n"
        "return [r, str(x), str(statistics.stdev([1.0, 2.0]))]\n"
    )


# The run's modules made at their first import (see Run._import).
_MADE_ON_IMPORT: dict[str, Callable[[Run], Module]] = {
    "sys": Run._sys,
    "traceback": Run._traceback,
    "logging": Run._logging,
}


def _entered_without_async(self: Any, *exc: Any) -> NoReturn:
    """``with`` of what is entered with ``async with`` (CPython: "'Lock' object does not
    support the context manager protocol", and nothing of ``async with``)."""
    what, how = _ASYNC_ONLY[type(self)]
    raise TypeError(f"{what} is entered with `async with`, not `with`: write `async with {how}:`")


# What a script enters with `async with` only, as it writes it, and the `async with` to write.
_ASYNC_ONLY: dict[type, tuple[str, str]] = {
    Lock: ("asyncio.Lock()", "lock"),
    Semaphore: ("asyncio.Semaphore()", "semaphore"),
    BoundedSemaphore: ("asyncio.BoundedSemaphore()", "semaphore"),
    _Timeout: ("asyncio.timeout(...)", "asyncio.timeout(...)"),
    _TaskGroup: ("asyncio.TaskGroup()", "asyncio.TaskGroup() as tg"),
}
for _kind in _ASYNC_ONLY:
    _kind.__enter__ = _kind.__exit__ = _entered_without_async  # type: ignore[attr-defined]

# The names scripts see of the sandbox's classes, in reprs, type(x) and CPython's own
# messages ("'Future' object is not callable", "expected str instance, Future found"): they
# said '_Call', '_TaskGroup', <class 'sandbox.python.Tools'>. asyncio's names for what stands
# for asyncio's; the builtins' for what a script has as builtins, as CPython names them.
for _kind, _name, _module in (
    (_Future, "Future", "asyncio"),
    (_Unawaited, "FutureIter", "_asyncio"),  # as CPython names a Future's iterator
    (_Call, "Future", "asyncio"),
    (_Gather, "Future", "asyncio"),
    (Task, "Task", "asyncio"),
    (_TaskGroup, "TaskGroup", "asyncio"),
    (_Timeout, "Timeout", "asyncio"),
    (_Yield, "coroutine", "builtins"),
    (_AsCompleted, "generator", "builtins"),
    (_ToolFunction, "tool", "builtins"),
    (_Stream, "stream", "builtins"),
    (Module, "module", "builtins"),
    (_Sink, "TextIOWrapper", "io"),
    (_Sealed, "type", "builtins"),
):
    _named(_kind, _name, _module)
for _kind in (
    Semaphore, BoundedSemaphore, Lock, Event, Queue, PriorityQueue, LifoQueue,
    CancelledError, InvalidStateError, QueueEmpty, QueueFull,
):  # fmt: skip
    _kind.__module__ = "asyncio"
for _kind in (Tools, Files, ToolError, LimitError, FileError):
    _kind.__module__ = "builtins"
# _ASYNC_ONLY by the names CPython's messages give the classes.
_ASYNC_ONLY_NAMED = {_TYPE_NAME.__get__(kind): entered for kind, entered in _ASYNC_ONLY.items()}

# Every class of the sandbox is made: from here on, _Opaque has no new subclass.
_SEALED = True
