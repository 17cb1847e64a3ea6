"""What sandbox/names.py says of a tool's name a script wrote wrongly."""

from __future__ import annotations

from sandbox.names import hyphened_reference, no_such_tool

PRICE = (
    "tools.get-price reads as tools.get minus price (a name cannot have a '-'): the tool is "
    "called as await tools.get_price({ ... })"
)


def test_the_hyphened_name_said_is_the_one_that_failed() -> None:
    """JavaScript's "price is not defined" names tools.get-price even when tools.get-x comes
    first on the line: the name was looked for again in the whole line, and the first
    tools.get-... was said (tools.get_x) or, with no such tool, the hint was lost."""
    line = "return [tools.get-x, await tools.get-price({ id: 1 })];"
    for names in [("get_x", "get_price"), ("get_price",)]:
        assert hyphened_reference("price", names, line) == PRICE
    assert hyphened_reference("price", ("get_x",), line) is None


def test_python_says_the_first_hyphened_name_that_is_a_tool() -> None:
    """Python's 'tools has no get' is said of the tools.get-... on the line that is a tool,
    not the first one there (which lost the hint when it was not a tool)."""
    line = "return [tools.get-x, await tools.get-price(id=1)]"
    said = no_such_tool("get", ("get_price",), line=line)
    assert said == PRICE.replace("({ ... })", "(...)")
