"""Durable acceptance: a record, its obligations and their jobs, written in the caller's
transaction, and the separate recorded states that follow (each attempt, provider results,
each obligation's end, business completion).

    record_id = records.accept(ctx.tx, kind="answer", data=answer,
                               obligations={"grading": JobSpec("grading", "grade", {...})})
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pigeon.core.ids import uuid7
from pigeon.exceptions import InvalidOperation, NotFound
from pigeon.jobs.app import App
from pigeon.jobs.job import JobSpec, dump_payload
from pigeon.jobs.ledger import record_completed
from pigeon.jobs.manager import write_job
from pigeon.jobs.rows import ACCEPTED, loads
from pigeon.jobs.store import JobStore, RecordSession
from pigeon.jobs.stores import session_for, store_for
from pigeon.logs import redact_text
from pigeon.storage.base import Database, Tx

RecordId = str


def accept(
    tx: Tx,
    *,
    kind: str,
    data: Any,
    obligations: Mapping[str, JobSpec] | None = None,
    record_id: RecordId | None = None,
    now: float | None = None,
    app: App | None = None,
    principal: str | None = None,
) -> RecordId:
    """Write the record, one pending obligation per entry and its job, in ``tx``.

    Pass the ``app`` for its tasks' retry policies to apply (see ``manager.enqueue``),
    and the ``principal`` that made the record (``ctx.principal``): it alone, besides the
    operators, may read it (``get(..., principal=...)``, the records route).

    Nothing is visible until the caller's transaction commits, and nothing remains if it
    rolls back: acceptance and the promise of follow-up work are one fact.

    An obligation's ``unique_key`` must be new: a key already held by a job (another
    record's obligation, or a plain job), or by two obligations of this record, raises
    InvalidOperation before anything is written. Deduplicating would tie this obligation
    to a job that settles someone else's, so it would stay pending forever; a record
    promises its own follow-up work."""
    if not kind:
        raise InvalidOperation("a record needs a kind")
    session: RecordSession = session_for(tx)
    obligations = dict(obligations or {})
    _check_unique_keys(session, obligations)
    now = time.time() if now is None else now
    rid = record_id or uuid7()
    data_json = dump_payload(data, f"record {kind}")
    session.insert_record(record_id=rid, kind=kind, data=data_json, principal=principal, now=now)
    session.ledger_event(rid, None, ACCEPTED, {"pending": sorted(obligations)}, now)
    for name, spec in sorted(obligations.items()):
        job_id = write_job(session, spec, record_id=rid, obligation=name, now=now, app=app)
        session.insert_obligation(rid, name, job_id, now)
    if not obligations:
        record_completed(session, rid, now)
    return rid


def _check_unique_keys(session: RecordSession, obligations: Mapping[str, JobSpec]) -> None:
    seen: dict[str, str] = {}
    for name, spec in sorted(obligations.items()):
        key = spec.unique_key
        if key is None:
            continue
        if key in seen:
            raise InvalidOperation(
                f"obligations {seen[key]!r} and {name!r} share unique_key {key!r}"
            )
        seen[key] = name
        held = session.job_by_unique_key(key)
        if held is not None:
            raise InvalidOperation(
                f"obligation {name!r}: unique_key {key!r} is already held by job "
                f"{held}; a record's obligation needs a job of its own"
            )


def get(
    db: Database | JobStore[RecordSession], record_id: str, *, principal: str | None = None
) -> dict[str, Any]:
    """The record as the world may see it: data, status, obligations and every state.

    ``principal``: the record must be this principal's, else NotFound, the very error of
    a record that does not exist (a user must not learn that another's exists)."""
    store: JobStore[RecordSession] = store_for(db)
    with store.reading() as session:
        return _view(session, record_id, principal)


def _shown(detail: Any) -> Any:
    """An event's detail with its ``error`` (a job's, quoted by an attempt or a failed
    obligation) redacted as the logs redact it: recorded before errors were."""
    if isinstance(detail, dict) and isinstance(detail.get("error"), str):
        return {**detail, "error": redact_text(detail["error"])}
    return detail


def view(tx: Tx, record_id: str, *, principal: str | None = None) -> dict[str, Any]:
    """``get`` inside a transaction the caller already holds (e.g. the intake's replay)."""
    return _view(session_for(tx), record_id, principal)


def _view(session: RecordSession, record_id: str, principal: str | None) -> dict[str, Any]:
    row = session.get_record(record_id)
    if row is None or (principal is not None and row["principal"] != principal):
        raise NotFound(f"no record {record_id!r}")
    obligations = session.obligations_of(record_id)
    events = session.events_of(record_id)
    return {
        "id": row["id"],
        "kind": row["kind"],
        "data": loads(row["data"]),
        "status": row["status"],
        "created_at": row["created_at"],
        "completed_at": row["completed_at"],
        "pending": [o["name"] for o in obligations if o["status"] == "pending"],
        "obligations": {
            o["name"]: {"status": o["status"], "job_id": o["job_id"], "updated_at": o["updated_at"]}
            for o in obligations
        },
        "events": [
            {
                "state": e["state"],
                "obligation": e["obligation"],
                "detail": _shown(loads(e["detail"])),
                "at": e["at"],
            }
            for e in events
        ],
    }
