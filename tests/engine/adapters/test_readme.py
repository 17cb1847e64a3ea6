"""The README's embedding snippets are the tested code: each chat loop is its example file's
`advance`, word for word, and the pydantic-ai snippet runs as written."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, Tool
from pydantic_ai.models.function import FunctionModel

from tests.engine.adapters import test_pydantic_ai as pai
from tests.engine.test_cli import ROOT

README = (ROOT / "README.md").read_text()


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.mark.parametrize("name", ["anthropic_loop", "openai_chat_loop", "openai_responses_loop"])
def test_each_loop_in_the_readme_is_its_example(name: str) -> None:
    source = (ROOT / "examples" / "loops" / f"{name}.py").read_text()
    advance = source[source.index("async def advance") :]
    assert any(advance in block for block in _blocks()), (
        f"the README's {name} differs from examples/loops/{name}.py"
    )


async def test_the_pydantic_ai_snippet_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (snippet,) = [b for b in _blocks() if "CodeModeToolset(" in b]
    body = textwrap.indent(snippet, "    ")
    namespace: dict[str, Any] = {
        "Agent": Agent,
        "Tool": Tool,
        "DeferredToolRequests": DeferredToolRequests,
        "DeferredToolResults": DeferredToolResults,
        "model": FunctionModel(pai.model),
        "list_prs": pai.list_prs,
        "comment": pai.comment,
    }
    exec(f"async def snippet():\n{body}\n    return toolset, run\n", namespace)
    pai.posted.clear()
    monkeypatch.chdir(tmp_path)  # the snippet's data_dir=".codemode"
    toolset, run = await namespace["snippet"]()
    await toolset.aclose()
    assert run.output == "The script said: Script finished.\nReturned:\nposted on #12"
    assert pai.posted == [(12, "ping")]
