"""The in-memory jobs store's tables, and its statements on the tables beside the jobs'
life cycle: the read-only figures (what the SQL read blocks ``job_queue_stats``,
``job_failed_by_owner``, ``job_failed_recent``, ``job_service_times`` and ``outbox_lag``
compute), the outbox, effect claims, provider calls and revoked principals.
``MemoryJobSession`` (``memory.py``) adds the jobs' own statements.

Values the SQL stores seal are kept as the clear JSON text they would seal, so a value
they could not store fails here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.rows import (
    FailedCount,
    FailedRecent,
    OutboxLag,
    OutboxRow,
    ProviderCall,
    QueueCounts,
    WorkerRow,
)

Row = dict[str, Any]  # a row of the live tables (the typed rows are read from them)
R = TypeVar("R")

JOB_COLUMNS = (
    "id", "queue", "task", "payload", "status", "attempts", "max_attempts", "attempt_base",
    "max_age", "created_at", "budget_start", "scheduled_at", "reserved_until", "lease_token",
    "worker", "claimed_at", "started_at", "finished_at", "last_error", "owner", "record_id",
    "obligation", "unique_key", "version",
)  # fmt: skip


def pick(kind: type[R], row: Mapping[str, Any]) -> R:
    """``row`` as the typed row ``kind`` (a TypedDict of ``pigeon.jobs.rows``): a copy with
    exactly its keys, as the SQL stores' statements select them."""
    return cast(R, {key: row[key] for key in kind.__annotations__})


def _empty_counts(queue: str) -> Row:
    """A queue's row of ``job_queue_stats`` before any job is counted."""
    row: Row = dict.fromkeys(("ready", "delayed", "reserved", "stuck"), 0)
    row.update(succeeded=0, failed=0, cancelled=0, oldest_ready_at=None)
    return {"queue": queue, **row}


@dataclass
class Tables:
    jobs: dict[int, Row] = field(default_factory=dict)
    attempts: dict[tuple[int, int], Row] = field(default_factory=dict)
    reviews: list[Row] = field(default_factory=list)
    ticks: dict[tuple[str, int], Row] = field(default_factory=dict)
    breaches: dict[str, Row] = field(default_factory=dict)
    records: dict[str, Row] = field(default_factory=dict)
    obligations: dict[tuple[str, str], Row] = field(default_factory=dict)
    events: list[Row] = field(default_factory=list)
    outbox: dict[int, Row] = field(default_factory=dict)
    effects: dict[tuple[str, str], str] = field(default_factory=dict)  # result JSON text
    provider_calls: dict[str, Row] = field(default_factory=dict)
    revoked: dict[str, Row] = field(default_factory=dict)
    workers: dict[str, Row] = field(default_factory=dict)
    next_id: int = 1
    next_outbox_id: int = 1


class TableStatements:
    """The statements on ``_t``, the live tables (the session's store holds its lock)."""

    @property
    def _t(self) -> Tables:
        raise NotImplementedError

    # -- reads: stats, the dashboard, the planner (the SQL blocks' semantics) ------------

    def queue_counts(self, now: float) -> list[QueueCounts]:
        counts: dict[str, Row] = {}
        for r in self._t.jobs.values():
            row = counts.setdefault(r["queue"], _empty_counts(r["queue"]))
            status = r["status"]
            # As job_queue_stats: waiting is queued and due, or claimed but not started
            # (within its lease: ready; any claimed-not-started job for the oldest age).
            unstarted = status == "reserved" and r["started_at"] is None
            waiting = (status == "queued" and r["scheduled_at"] <= now) or unstarted
            oldest = row["oldest_ready_at"]
            if waiting and (oldest is None or r["scheduled_at"] < oldest):
                row["oldest_ready_at"] = r["scheduled_at"]
            if status == "queued":
                row["ready" if r["scheduled_at"] <= now else "delayed"] += 1
            elif status == "reserved":
                live = r["reserved_until"] >= now
                row[("ready" if unstarted else "reserved") if live else "stuck"] += 1
            elif status in ("succeeded", "failed", "cancelled"):
                row[status] += 1
        return [pick(QueueCounts, counts[q]) for q in sorted(counts)]

    def failed_counts(self) -> list[FailedCount]:
        groups: dict[tuple[str, str], Row] = {}
        for r in self._t.jobs.values():
            if r["status"] != "failed":
                continue
            row = groups.setdefault(
                (r["owner"], r["queue"]),
                {"owner": r["owner"], "queue": r["queue"], "n": 0, "latest": None},
            )
            row["n"] += 1
            if row["latest"] is None or r["finished_at"] > row["latest"]:
                row["latest"] = r["finished_at"]
        # NULL owners sort first, as SQLite orders them (never NULL in practice: a failure
        # always records its owner).
        order = sorted(groups, key=lambda k: (k[0] is not None, k[0] or "", k[1]))
        return [pick(FailedCount, groups[k]) for k in order]

    def failed_recent(self, limit: int) -> list[FailedRecent]:
        failed = [r for r in self._t.jobs.values() if r["status"] == "failed"]
        failed.sort(key=lambda r: (r["finished_at"], r["id"]), reverse=True)
        return [pick(FailedRecent, r) for r in failed[:limit]]

    def service_times(self, queue: str, limit: int) -> list[float]:
        done = [
            a
            for (job_id, _), a in self._t.attempts.items()
            if a["outcome"] == "succeeded"
            and a["finished_at"] is not None
            and job_id in self._t.jobs
            and self._t.jobs[job_id]["queue"] == queue
        ]
        done.sort(key=lambda a: a["finished_at"], reverse=True)
        return [float(a["finished_at"] - a["started_at"]) for a in done[:limit]]

    def add_outbox(self, *, message_id: str, topic: str, payload: str, now: float) -> None:
        if any(m["message_id"] == message_id for m in self._t.outbox.values()):
            raise InvalidOperation(f"outbox message {message_id!r} exists already")  # unique
        row_id = self._t.next_outbox_id
        self._t.next_outbox_id += 1
        self._t.outbox[row_id] = {
            "id": row_id, "message_id": message_id, "topic": topic, "payload": payload,
            "created_at": now, "published_at": None, "attempts": 0, "last_error": None,
        }  # fmt: skip

    def outbox_pending(self, limit: int) -> list[OutboxRow]:
        pending = [m for _, m in sorted(self._t.outbox.items()) if m["published_at"] is None]
        return [pick(OutboxRow, m) for m in pending[:limit]]

    def mark_published(self, row_ids: Sequence[int], now: float) -> None:
        for row_id in row_ids:
            row = self._t.outbox.get(row_id)
            if row is not None and row["published_at"] is None:
                row.update(published_at=now, attempts=row["attempts"] + 1)

    def mark_outbox_error(self, row_id: int, error: str) -> None:
        row = self._t.outbox.get(row_id)
        if row is not None:
            row.update(attempts=row["attempts"] + 1, last_error=error)

    def purge_published(self, *, before: float, limit: int) -> int:
        doomed = sorted(
            (m for m in self._t.outbox.values()
             if m["published_at"] is not None and m["published_at"] < before),
            key=lambda m: (m["published_at"], m["id"]),
        )[:limit]  # fmt: skip
        for row in doomed:
            del self._t.outbox[row["id"]]
        return len(doomed)

    def outbox_lag(self) -> OutboxLag:
        pending = [m for m in self._t.outbox.values() if m["published_at"] is None]
        return {
            "pending": len(pending),
            "oldest": min((m["created_at"] for m in pending), default=None),
        }

    # -- effects, provider calls, revoked principals ---------------------------------

    def claim_effect(self, scope: str, key: str, now: float) -> bool:
        if (scope, key) in self._t.effects:
            return False
        self._t.effects[scope, key] = "null"  # as effect_claim writes it
        return True

    def effect_result(self, scope: str, key: str) -> str | None:
        return self._t.effects.get((scope, key))

    def set_effect_result(self, scope: str, key: str, result: str) -> None:
        if (scope, key) in self._t.effects:
            self._t.effects[scope, key] = result

    def provider_call(self, reference: str) -> ProviderCall | None:
        row = self._t.provider_calls.get(reference)
        return None if row is None else pick(ProviderCall, row)

    def insert_provider_call(
        self, *, reference: str, provider: str, idempotency_key: str, request: str, now: float
    ) -> None:
        if reference in self._t.provider_calls:  # the primary key
            raise InvalidOperation(f"provider call {reference!r} exists already")
        self._t.provider_calls[reference] = {
            "reference": reference, "provider": provider, "idempotency_key": idempotency_key,
            "request": request, "status": "pending", "result": None, "attempts": 0,
            "created_at": now, "updated_at": now,
        }  # fmt: skip

    def count_provider_attempt(self, reference: str, now: float) -> None:
        row = self._t.provider_calls.get(reference)
        if row is not None:
            row.update(attempts=row["attempts"] + 1, updated_at=now)

    def settle_provider_call(self, reference: str, status: str, result: str, now: float) -> None:
        row = self._t.provider_calls.get(reference)
        if row is not None:
            row.update(status=status, result=result, updated_at=now)

    def revoke_principal(self, principal: str, reason: str, now: float) -> None:
        self._t.revoked[principal] = {"principal": principal, "revoked_at": now, "reason": reason}

    def restore_principal(self, principal: str) -> None:
        self._t.revoked.pop(principal, None)

    def principal_revoked(self, principal: str) -> str | None:
        row = self._t.revoked.get(principal)
        return None if row is None else str(row["reason"])

    # -- the workers' registry ---------------------------------------------------------

    def advertise_worker(self, row: WorkerRow) -> None:
        self._t.workers[row["name"]] = dict(row)

    def withdraw_worker(self, name: str) -> None:
        self._t.workers.pop(name, None)

    def forget_workers(self, before: float) -> int:
        gone = [name for name, row in self._t.workers.items() if row["seen_at"] < before]
        for name in gone:
            del self._t.workers[name]
        return len(gone)

    def workers_seen(self, since: float) -> list[WorkerRow]:
        rows = self._t.workers
        return [pick(WorkerRow, rows[n]) for n in sorted(rows) if rows[n]["seen_at"] >= since]
