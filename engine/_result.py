"""RunResult: how a `run_code` call ended, or where it paused, as the host receives it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["finished", "failed", "paused", "elsewhere"]


@dataclass
class RunResult:
    """How a `run_code` call ended, or where it paused.

    ``text`` is what the model sees; ``content`` the same as MCP content blocks. A paused
    result names what it waits for in ``waiting`` (each ``{call_id, name, arguments,
    reason}``, reason ``approval``, ``client`` or ``held``); resume it with
    :meth:`CodeMode.resume` once they are answered. ``elsewhere``: another host drives the
    script now; its outcome is in the session log when it ends (``resume(id, wait=...)``
    waits for it).
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

    @property
    def content(self) -> list[dict[str, Any]]:
        """MCP content blocks: the text, then each media file the script showed."""
        return [{"type": "text", "text": self.text}, *self.media]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["content"] = self.content
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        known = {k: v for k, v in data.items() if k != "content"}
        return cls(**known)
