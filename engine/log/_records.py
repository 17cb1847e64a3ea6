"""What the session log holds: scripts, their calls, and who drives each script.

The log is the whole state of a script. These types are what every store reads and writes;
the stores differ only in where they keep them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine._errors import CodeModeError

# Call states, in the order a call moves through them.
PROPOSED = "proposed"  # recorded; the worker has not answered yet
AWAITING_APPROVAL = "awaiting_approval"  # a person must approve it
APPROVED = "approved"  # approved; runs at the next step
AWAITING_CLIENT = "awaiting_client"  # the client runs it and sends the result
RUNNING = "running"  # claimed: it is running, or its owner died while it ran
DONE = "done"
FAILED = "failed"
SETTLED = frozenset({DONE, FAILED})
CALL_STATES = frozenset({PROPOSED, AWAITING_APPROVAL, APPROVED, AWAITING_CLIENT, RUNNING}) | SETTLED
# The notes of a call a person answered (CodeMode.approve, reject), which tell it, once it ran
# or failed, from a call that never waited for an answer.
APPROVED_NOTE = "approved"
REFUSED_NOTE = "refused by a person"
ANSWERED_NOTES = frozenset({APPROVED_NOTE, REFUSED_NOTE})

# What the owner's worker may decide for a proposed call.
DECIDED = frozenset({AWAITING_APPROVAL, APPROVED, AWAITING_CLIENT, FAILED})

# Script states.
ACTIVE = "active"
PAUSED = "paused"
FINISHED = "finished"
SCRIPT_FAILED = "failed"
ENDED = frozenset({FINISHED, SCRIPT_FAILED})


class LeaseLost(CodeModeError):
    """The host no longer owns the script: another host took it over (its lease expired or it
    was released), so this host's write was refused. Stop driving the script; its new owner
    carries on from the log."""


class CallConflict(CodeModeError):
    """A call was not in the state the write expected (another writer moved it first)."""


@dataclass(frozen=True)
class Lease:
    """The right to drive one script: held by ``owner`` until ``expires_ms`` (store time).

    ``token`` is the fencing token: it grows with every acquisition, and every write the
    owner makes carries it, so a write from a host whose lease was taken over is refused.
    """

    script_id: str
    owner: str
    token: int
    expires_ms: int


# A script's seed is below 2**SEED_BITS: what a signed 64-bit column holds, and every store
# keeps it whole (the conformance suite writes the largest).
SEED_BITS = 63


@dataclass
class ScriptRecord:
    """A script in the log: its code, its fixed clock, and what its runs have used.

    ``key`` makes a start idempotent (a model's tool-use id, say): a second start with the same
    tenant and key continues the first script (a key is unique within its tenant; another
    tenant's start with it makes a script of its own). ``tools`` is the fingerprint of the
    tool set it started with (tool name to a digest of its input schema). ``ready`` says the
    script waits for no one and any host may claim it and step it. ``updated_ms`` is when
    its status, its hold or one of its waiting calls last changed (the ready scripts are
    claimed oldest first); its owner's writes of calls, results and step counts leave it.
    """

    id: str
    code: str
    tenant: str
    now_ms: int
    seed: int
    created_ms: int
    key: str | None = None
    language: str = "javascript"
    status: str = ACTIVE
    held: bool = False
    ready: bool = False
    steps: int = 0
    total_compute_ms: float = 0.0
    total_file_bytes: int = 0
    outcome: dict[str, Any] | None = None  # the final result, once ended
    files: list[dict[str, Any]] = field(default_factory=list)  # id, mime, size, blob, skill
    tools: dict[str, str] = field(default_factory=dict)
    updated_ms: int = 0
    lease: Lease | None = None  # the last lease taken; it may have expired


@dataclass
class CallEntry:
    """One call a script made, at its position in the script's call order.

    ``token`` is the fencing token of the lease under which the call was claimed (set when it
    starts ``running``), so a later owner knows a ``running`` call is a predecessor's.
    """

    script_id: str
    index: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    argument_bytes: int
    state: str = PROPOSED
    result: Any = None
    result_bytes: int | None = None
    error: str | None = None
    note: str | None = None  # why it waits, who refused it
    owner: str | None = None  # the host that ran it
    token: int | None = None
    created_ms: int = 0
    started_ms: int | None = None
    ended_ms: int | None = None

    @property
    def settled(self) -> bool:
        return self.state in SETTLED


@dataclass(frozen=True)
class Decision:
    """What the owner's worker decided for a proposed call: its next state and why."""

    index: int
    state: str  # one of DECIDED
    note: str | None = None
    error: str | None = None  # with FAILED: the message the script sees


@dataclass(frozen=True)
class Settlement:
    """How a running call ended: a result (``DONE``) or an error (``FAILED``).

    ``result_bytes`` is the size of the result's JSON; ``result`` may be left out (``None``)
    when it is over the script's budget on its own, keeping only its size.
    """

    index: int
    state: str  # DONE or FAILED
    result: Any = None
    result_bytes: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class StepUsage:
    """What the script's runs have used after a step: counted by the owner, written fenced."""

    steps: int
    total_compute_ms: float
    total_file_bytes: int
