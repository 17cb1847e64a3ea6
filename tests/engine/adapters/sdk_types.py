"""Checks a value against an official SDK's own types, as strictly as the API reads them.

The SDKs' request types are ``TypedDict``s, which nothing checks at run time. Here each is
validated with pydantic (unknown keys refused, every ``Iterable`` field consumed, since
pydantic validates those lazily), and the validated value must equal the one given, so a key
a nested type does not know, dropped silently by pydantic, fails too.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, TypeAdapter


def _consume(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _consume(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_consume(v) for v in value]
    if type(value).__name__ == "ValidatorIterator":  # an Iterable field: validate each item
        return [_consume(v) for v in value]
    return value


def conforms(sdk_type: Any, value: Any) -> None:
    """Raise unless ``value`` is a valid ``sdk_type`` with no key the type does not declare."""
    # A TypedDict cannot take a config of its own in a TypeAdapter; a list of it can.
    adapter = TypeAdapter(list[sdk_type], config=ConfigDict(extra="forbid"))  # type: ignore[valid-type]
    validated = _consume(adapter.validate_python([value]))[0]
    if validated != value:
        raise AssertionError(f"the SDK's type drops or changes part of {value!r}: {validated!r}")
