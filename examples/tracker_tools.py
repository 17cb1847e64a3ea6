"""Tools over a small issue tracker kept in SQLite: what `make demo` runs against.

The data is made when this file loads, with dates relative to now, so the stale-PRs script
finds the same PRs stale whenever it runs.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from engine import tool

_db = sqlite3.connect(":memory:", check_same_thread=False)
_lock = threading.Lock()
_now = datetime.now(UTC)


def _ago(days: float) -> str:
    return (_now - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


_db.executescript(
    """
    CREATE TABLE prs (repo TEXT, number INTEGER, title TEXT, author TEXT, state TEXT,
                      updated_at TEXT, PRIMARY KEY (repo, number));
    CREATE TABLE reviews (repo TEXT, number INTEGER, reviewer TEXT, verdict TEXT);
    """
)
_db.executemany(
    "INSERT INTO prs VALUES (?, ?, ?, ?, ?, ?)",
    [
        ("acme/api", 12, "Retry webhooks with backoff", "ana", "open", _ago(30)),
        ("acme/api", 15, "Paginate /v2/orders", "bo", "open", _ago(21)),
        ("acme/api", 18, "Drop Python 3.9", "cy", "open", _ago(3)),
        ("acme/api", 19, "Fix typo in README", "dee", "closed", _ago(40)),
        ("acme/api", 21, "Rate-limit login attempts", "ana", "open", _ago(1)),
        ("acme/web", 7, "Dark mode", "eli", "open", _ago(60)),
    ],
)
_db.executemany(
    "INSERT INTO reviews VALUES (?, ?, ?, ?)",
    [
        ("acme/api", 15, "cy", "changes_requested"),
        ("acme/api", 15, "ana", "commented"),
        ("acme/api", 18, "bo", "approved"),
        ("acme/web", 7, "ana", "commented"),
    ],
)


class PullRequest(BaseModel):
    number: int
    title: str
    author: str
    state: Literal["open", "closed"]
    updated_at: str


class Review(BaseModel):
    reviewer: str
    verdict: Literal["approved", "changes_requested", "commented"]


@tool(name="github__list_prs")
def list_prs(repo: str, state: Literal["open", "closed", "all"] = "open") -> list[PullRequest]:
    """List the pull requests of a repository, newest update first.

    Args:
        repo: The repository, as "owner/name".
        state: Which pull requests to list.
    """
    sql = "SELECT number, title, author, state, updated_at FROM prs WHERE repo = ?"
    params: list[str] = [repo]
    if state != "all":
        sql += " AND state = ?"
        params.append(state)
    with _lock:
        rows = _db.execute(sql + " ORDER BY updated_at DESC", params).fetchall()
    if not rows and state == "all":
        raise ValueError(f"no repository {repo!r}")
    return [
        PullRequest(number=n, title=t, author=a, state=s, updated_at=u) for n, t, a, s, u in rows
    ]


@tool(name="github__get_reviews")
def get_reviews(number: int, repo: str = "acme/api") -> list[Review]:
    """The reviews of one pull request.

    Args:
        number: The pull request's number.
        repo: The repository, as "owner/name".
    """
    with _lock:
        rows = _db.execute(
            "SELECT reviewer, verdict FROM reviews WHERE repo = ? AND number = ?", (repo, number)
        ).fetchall()
    return [Review(reviewer=r, verdict=v) for r, v in rows]


@tool(name="github__comment", needs_approval=True)
def comment(number: int, body: str, repo: str = "acme/api") -> dict[str, str]:
    """Post a comment on a pull request. A person approves each comment first.

    Args:
        number: The pull request's number.
        body: The comment, in Markdown.
        repo: The repository, as "owner/name".
    """
    return {"status": "posted", "url": f"https://tracker.example/{repo}/pull/{number}#comment"}
