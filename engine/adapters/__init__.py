"""Model API formats and framework adapters: the ``run_code`` tool and its results in the
shape each model API takes (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses,
MCP), and adapters that fit code mode into an agent framework (``engine.adapters.pydantic_ai``)
or a tracing system (``engine.adapters.otel``), each behind an optional extra."""

from engine.adapters._formats import FORMATS, Format, result_for, tool_definition

__all__ = ["FORMATS", "Format", "result_for", "tool_definition"]
