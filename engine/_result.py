"""RunResult: how a `run_code` call ended, or where it paused, as the host receives it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from engine.adapters._formats import mcp_content, result_for

Status = Literal["finished", "failed", "paused", "elsewhere"]


@dataclass
class RunResult:
    """How a `run_code` call ended, or where it paused.

    ``text`` is what the model sees; ``content`` the same as MCP content blocks. A paused
    result names what it waits for in ``waiting`` (each ``{call_id, name, arguments,
    reason}``, reason ``approval`` or ``client``, or ``turn`` for a call that needs no answer
    and waits for its step's calls that do: the calls of one step go out together); resume it
    with :meth:`CodeMode.resume` once they are answered. A script on hold
    (:meth:`CodeMode.hold`) pauses waiting on no call (``waiting`` is empty; its text says it
    is held) until :meth:`CodeMode.release`. ``elsewhere``: another host drives the
    script now; its outcome is in the session log when it ends (``resume(id, wait=...)``
    waits for it).

    ``media`` are the media files the script showed, as MCP blocks; the image and audio
    blocks it returned are in ``value``, and attached after them within what the limits
    ``shown_files`` and ``shown_media`` leave: ``returned_left_out`` lists those that were
    not (each ``{index, mimeType, bytes, limit}``, ``index`` counting the returned blocks
    from 1), which every format's text names as left out.
    """

    script_id: str
    status: Status
    text: str
    value: Any = None
    returned: bool = False
    error: dict[str, Any] | None = None
    limit: str | None = None
    waiting: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    shown: list[dict[str, Any]] = field(default_factory=list)
    media: list[dict[str, Any]] = field(default_factory=list)
    returned_left_out: list[dict[str, Any]] = field(default_factory=list)

    @property
    def content(self) -> list[dict[str, Any]]:
        """MCP content blocks: the text, then each media file the script showed, then each
        image or audio block it returned (an MCP tool's, passed on) that is not left out;
        the text names those instead of spelling out their bytes."""
        return mcp_content(self)

    def to_anthropic(self, tool_use_id: str) -> dict[str, Any]:
        """The Anthropic Messages ``tool_result`` block for the model's ``tool_use`` id
        (text, images, PDFs; ``is_error`` when the script failed)."""
        result: dict[str, Any] = result_for(self, "anthropic", tool_use_id)
        return result

    def to_openai_chat(self, tool_call_id: str) -> list[dict[str, Any]]:
        """The Chat Completions messages that answer the model's tool call: the ``tool``
        message, then a ``user`` message with the shown media, if any (a ``tool`` message
        takes text only)."""
        messages: list[dict[str, Any]] = result_for(self, "openai_chat", tool_call_id)
        return messages

    def to_openai_responses(self, call_id: str) -> dict[str, Any]:
        """The Responses API ``function_call_output`` item for the model's ``call_id``."""
        item: dict[str, Any] = result_for(self, "openai_responses", call_id)
        return item

    def to_mcp(self) -> dict[str, Any]:
        """An MCP ``CallToolResult``: ``content`` and ``isError``."""
        answer: dict[str, Any] = result_for(self, "mcp")
        return answer

    def to_dict(self) -> dict[str, Any]:
        """The result as plain data: its fields and ``content`` (what the log keeps, and
        ``codemode run --json`` prints). Shallow: the value and the lists are this result's
        own, not copies (a copy of a 256 KiB value, made field by field, took 50 to 80 ms
        of the script's return), so a caller that changes them copies first."""
        data = {name: getattr(self, name) for name in _FIELDS}
        data["content"] = self.content
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        known = {k: v for k, v in data.items() if k != "content"}
        return cls(**known)


_FIELDS = tuple(f.name for f in fields(RunResult))
