"""Property tests for the declarations of tools that share types: whatever schemas several
tools have (definitions of one name in several tools, alike or not, recursive or not;
objects written out alike in several places; properties named as keywords), and whatever the
budget, a block in either language is the same bytes every time, declares each of its named
types once, and names no type it does not declare (one declared on a try that the budget
then dropped, say). Derandomized (tests._fuzz).
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine._tools import Tool
from engine.languages.javascript._declarations import declare_tools
from engine.languages.python import PYTHON
from tests._fuzz import derandomized

FUZZ = derandomized(150)

TOOL_NAMES = ("alpha", "beta_tool", "gamma", "delta")
DEFINITIONS = ("Item", "User", "Node")
# Keys that are keywords elsewhere in a schema: as properties they are names.
KEYS = ("name", "title", "default", "items", "type", "entities")

leaves = st.one_of(
    st.sampled_from(
        [
            {"type": "string"},
            {"type": "integer", "minimum": 1},
            {"type": "boolean", "description": "Whether."},
            {"enum": ["a", "b"]},
            {"type": "string", "title": "Named"},
        ]
    ),
    st.sampled_from(DEFINITIONS).map(lambda d: {"$ref": f"#/$defs/{d}"}),
)


def _object(properties: dict[str, Any], closed: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if properties:
        schema["required"] = sorted(properties)[:1]
    if closed:
        schema["additionalProperties"] = False
    return schema


schemas = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.builds(
            _object, st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), st.booleans()
        ),
        inner.map(lambda s: {"type": "array", "items": s}),
        st.lists(inner, min_size=2, max_size=3).map(lambda b: {"anyOf": b}),
    ),
    max_leaves=8,
)
# Each tool's definitions: some of the shared names, each one of a few bodies, so that tools
# define a name alike or not (and a body may refer to a definition: recursion).
definitions = st.dictionaries(st.sampled_from(DEFINITIONS), schemas, max_size=3)


@st.composite
def tool_sets(draw: st.DrawFn) -> list[Tool]:
    count = draw(st.integers(min_value=1, max_value=len(TOOL_NAMES)))
    pool = draw(st.lists(schemas, min_size=1, max_size=3))  # objects tools may repeat
    tools = []
    for name in TOOL_NAMES[:count]:
        defs = draw(definitions)
        properties = draw(
            st.dictionaries(st.sampled_from(KEYS), st.one_of(schemas, st.sampled_from(pool)))
        )
        # A reference to a name the tool does not define goes nowhere: define each.
        for d in DEFINITIONS:
            defs.setdefault(d, {"type": "string"})
        input_schema = {**_object(properties, False), "$defs": defs}
        output = draw(st.one_of(st.none(), schemas, st.sampled_from(pool)))
        if output is not None:
            output = (
                {**output, "$defs": defs} if "$ref" not in output else {"$defs": defs, **output}
            )
        tools.append(Tool(name, input_schema=input_schema, output_schema=output))
    return tools


_PREFIXES = "|".join(re.escape(n[:1].upper() + n[1:]) for n in TOOL_NAMES)
_REFERENCED = re.compile(rf"\b(?:{_PREFIXES})_\w+")
_TS_DECLARED = re.compile(r"^type (\w+) = ", re.M)
_PY_DECLARED = re.compile(r"^(?:class (\w+)\(|(\w+) = TypedDict\(|(\w+): TypeAlias = )", re.M)


def _names(pattern: re.Pattern[str], block: str) -> list[str]:
    return ["".join(m) for m in pattern.findall(block)]


@FUZZ
@given(tool_sets(), st.sampled_from([600, 2000, 10**9]))
def test_a_block_declares_each_type_it_names_once(tools: list[Tool], budget: int) -> None:
    for language, declare, declared in (
        ("typescript", declare_tools, _TS_DECLARED),
        ("python", PYTHON.declare_tools, _PY_DECLARED),
    ):
        block, chosen = declare(tools, budget)
        assert chosen and chosen == tools[: len(chosen)], language
        assert declare(tools, budget)[0] == block, language  # the same bytes again
        names = _names(declared, block)
        assert len(names) == len(set(names)), (language, block)
        missing = set(_REFERENCED.findall(block)) - set(names)
        assert not missing, (language, missing, block)
