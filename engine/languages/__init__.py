"""The languages a script can be written in: for each, a dialect (how ``run_code`` is
described and the tools declared in the language's types) and a type check against those
declarations before the script's first call. ``javascript`` (with TypeScript's types) and
``python``. The schema walk and the 12 KiB block rules are shared (``_walk``, ``_dialect``).
"""

from __future__ import annotations

from typing import Literal

from engine._errors import ConfigError
from engine.languages._dialect import Dialect
from engine.languages.javascript import JAVASCRIPT
from engine.languages.python import PYTHON

Language = Literal["javascript", "python"]
LANGUAGES: tuple[Language, ...] = ("javascript", "python")

_DIALECTS: dict[str, Dialect] = {JAVASCRIPT.language: JAVASCRIPT, PYTHON.language: PYTHON}


def check_language(language: object, where: str = "language") -> Language:
    """``language`` if it is one a script may be written in; else a :class:`ConfigError`
    naming them (a language is the host's option)."""
    if language not in LANGUAGES:
        raise ConfigError(
            f"{where} = {language!r:.80}; use " + " or ".join(f'"{x}"' for x in LANGUAGES)
        )
    return language


def dialect(language: str) -> Dialect:
    """The dialect of ``language`` (one of :data:`LANGUAGES`)."""
    return _DIALECTS[check_language(language)]


__all__ = ["LANGUAGES", "Dialect", "Language", "check_language", "dialect"]
