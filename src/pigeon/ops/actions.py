"""Operator actions on the failed store, one or many at once: a dry run that counts what a
selection matches, then the action itself (``FailedStore.retry`` / ``cancel``, the code of
``pigeon jobs retry`` / ``cancel``, per job), recorded in the operator action log with who,
when, why, what was selected and what came of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pigeon.exceptions import InvalidOperation, InvalidState, NotFound
from pigeon.jobs._db import reading
from pigeon.jobs.failed import FailedStore
from pigeon.jobs.rows import dumps
from pigeon.ops.queries import error_class
from pigeon.ops.reader import OPS
from pigeon.storage.base import Database
from pigeon.storage.sealed import JOB_ERROR

ACTIONS = ("retry", "cancel")
MAX_JOBS = 10_000  # jobs one action may touch
SCAN_JOBS = 200_000  # failed jobs of the owner and queue read to find them
MAX_TEXT = 500  # characters of a reason or an actor


@dataclass(frozen=True)
class Selection:
    """Failed jobs by id, or by group (owner, queue, error class; None: any); never newer
    than ``max_id``, the newest job the dry run saw."""

    ids: tuple[int, ...] = ()
    owner: str | None = None
    queue: str | None = None
    error_class: str | None = None
    max_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["ids"] = list(self.ids)
        return found


@dataclass(frozen=True)
class Outcome:
    action_id: int | None
    matched: int
    done: int
    skipped: int  # no longer failed (retried or cancelled meanwhile) or gone


def _params(selection: Selection, max_id: int) -> dict[str, Any]:
    return {
        "owner": selection.owner,
        "queue": selection.queue,
        "max_id": max_id,
        "limit": SCAN_JOBS,
    }


def matching(db: Database, selection: Selection) -> tuple[list[int], int]:
    """The dry run: the failed jobs the selection matches now, and the newest job id seen
    (the action applies to none newer)."""
    with reading(db) as tx:
        max_id = selection.max_id
        if max_id is None:
            max_id = int(OPS.run(tx, "max_job_id").fetchone()["id"])
        rows = OPS.run(tx, "failed_select", _params(selection, max_id)).fetchall()
        for row in rows:  # errors are sealed at rest when the server has keys
            row["last_error"] = tx.cipher.open(row["last_error"], *JOB_ERROR.ad, str(row["id"]))
    ids = [
        int(row["id"])
        for row in rows
        if selection.error_class is None or error_class(row["last_error"]) == selection.error_class
    ]
    if selection.ids:
        wanted = set(selection.ids)
        ids = [i for i in ids if i in wanted]
    return ids[:MAX_JOBS], max_id


def apply(
    db: Database,
    action: str,
    selection: Selection,
    *,
    actor: str,
    reason: str,
    clock: Callable[[], float] = time.time,
) -> Outcome:
    """Retry or cancel every failed job the selection matches; one row in the action log."""
    if action not in ACTIONS:
        raise InvalidOperation(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    actor, reason = actor.strip(), reason.strip()
    if not actor:
        raise InvalidOperation(f"a {action} needs the name of who takes it")
    if not reason:
        raise InvalidOperation(f"a {action} needs a reason")
    if len(actor) > MAX_TEXT or len(reason) > MAX_TEXT:
        raise InvalidOperation(f"actor and reason are at most {MAX_TEXT} characters")
    ids, max_id = matching(db, selection)
    store = FailedStore(db, clock=clock)
    done = skipped = 0
    for job_id in ids:
        try:
            if action == "retry":
                store.retry(job_id, reviewer=actor, reason=reason)
            else:
                store.cancel(job_id, reviewer=actor, reason=reason)
            done += 1
        except (InvalidState, NotFound):
            skipped += 1  # retried or cancelled by someone else since the dry run
    chosen = selection if selection.max_id is not None else _with_max(selection, max_id)
    with db.transaction() as tx:
        params = {
            "at": clock(),
            "actor": actor,
            "action": action,
            "reason": reason,
            "selection": dumps(chosen.as_dict()),
            "matched": len(ids),
            "done": done,
            "skipped": skipped,
        }
        # RETURNING id on both backends; fetchall ends the statement before the commit.
        (inserted,) = OPS.run(tx, "action_insert", params).fetchall()
        action_id = int(inserted["id"])
    return Outcome(action_id, len(ids), done, skipped)


def _with_max(selection: Selection, max_id: int) -> Selection:
    return Selection(selection.ids, selection.owner, selection.queue, selection.error_class, max_id)


def action_log(db: Database, *, limit: int = 50) -> list[dict[str, Any]]:
    with reading(db) as tx:
        rows: list[dict[str, Any]] = OPS.run(tx, "action_log", {"limit": limit}).fetchall()
    return rows
