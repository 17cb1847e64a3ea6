"""Checks and messages every store shares, so each store refuses the same things the same way."""

from __future__ import annotations

import re

from engine.log import _records as r

# What no store keeps in text: a NUL (PostgreSQL's text takes none) or a lone surrogate (not
# Unicode, so no UTF-8 column takes it). Names and scripts are checked against it up front.
NOT_KEPT = re.compile("[\x00\ud800-\udfff]")


def next_token(held: r.Lease | None, owner: str, now: int, take_from: str | None) -> int | None:
    """The token ``owner`` gets on taking a lease that is now ``held``, or ``None`` while
    another live owner holds it: the same token for the holder itself, a larger one for
    anyone else (once it expired, or when its holder is ``take_from``, known dead)."""
    if held is not None and held.expires_ms > now and held.owner != take_from:
        return held.token if held.owner == owner else None
    return (held.token if held is not None else 0) + 1


def lost(lease: r.Lease, now: r.Lease | None) -> str:
    holder = f"{now.owner} (token {now.token})" if now is not None else "no one"
    return (
        f"the lease on script {lease.script_id} (token {lease.token}) was taken over; it is "
        f"now held by {holder}, so this host's write was refused: stop driving the script"
    )


def out_of_order(entry: r.CallEntry, expected: int) -> str:
    return (
        f"call {entry.call_id} is at position {entry.index} of script {entry.script_id}, "
        f"but the log's next position is {expected}"
    )


def own_call(entry: r.CallEntry) -> str:
    return (
        f"call {entry.call_id} was claimed under this lease (token {entry.token}): it is "
        "running here, not interrupted"
    )


def not_waiting(entry: r.CallEntry, expect: str) -> str:
    """Why ``entry`` cannot take an answer meant for a call in state ``expect``, from what
    the call is now."""
    state = entry.state
    now = "has failed" if state == r.FAILED else f"is {state.replace('_', ' ')}"
    said = f"call {entry.call_id} of script {entry.script_id} {now}, not {expect.replace('_', ' ')}"
    if expect != r.AWAITING_APPROVAL:
        return said + (" (answered already, by another host or person)" if entry.settled else "")
    # A person's answer is in the call's note: a call without one never waited for a person
    # (it said "answered already, by another host or person" of one that simply ran).
    if entry.note in r.ANSWERED_NOTES:
        done = {r.APPROVED: ": it runs when the script resumes", r.RUNNING: ": it runs now"}
        answer = "refused" if entry.note == r.REFUSED_NOTE else "approved"
        return said + f" ({answer} already, by another host or person{done.get(state, '')})"
    why = {
        r.PROPOSED: "its host has yet to decide whether it needs approval",
        r.APPROVED: "it needs no approval: it runs when the script resumes",
        # The CLI has no client: say who gives the result (approve and reject were tried).
        r.AWAITING_CLIENT: "it needs no approval: it waits for the client's result, which the "
        "host gives with engine.client_result(script_id, call_id, result) or error=...",
        r.RUNNING: "it needs no approval: it runs now",
        r.DONE: "it needed no approval: it ran",
        r.FAILED: "it waits for no answer: it ran and failed, or was refused",
    }
    return said + f" ({why[state]})" if state in why else said


def check_decision(decision: r.Decision) -> None:
    if decision.state not in r.DECIDED:
        raise ValueError(f"a worker cannot move a call to {decision.state!r}")


def check_new_call(entry: r.CallEntry) -> None:
    """A call is added proposed or decided; the store sets who runs it when it claims it."""
    if entry.state != r.PROPOSED and entry.state not in r.DECIDED:
        raise ValueError(f"a call is added proposed or decided, not {entry.state!r}")
    if entry.owner is not None or entry.token is not None:
        raise ValueError("a call is added unclaimed: the store sets its owner and token")


def check_settlement(settlement: r.Settlement) -> None:
    if settlement.state not in r.SETTLED:
        raise ValueError(f"a call settles as done or failed, not {settlement.state!r}")


def check_ending(status: str) -> None:
    if status not in r.ENDED:
        raise ValueError(f"a script ends finished or failed, not {status!r}")


def check_answer(expect: str, state: str) -> None:
    allowed = {
        r.AWAITING_APPROVAL: {r.APPROVED, r.FAILED},
        r.AWAITING_CLIENT: {r.DONE, r.FAILED},
    }
    if state not in allowed.get(expect, set()):
        raise ValueError(f"an answer cannot move a call from {expect!r} to {state!r}")


def wrong_state(
    script_id: str, call_id: str, state: str, states: tuple[str, ...] | set[str]
) -> str:
    return f"call {call_id} of script {script_id} is {state}, not {' or '.join(sorted(states))}"
