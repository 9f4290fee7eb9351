"""A seeded operations scenario, made through the library itself (records.accept, the job
manager's claims and finishes, effects, the outbox), and the database's own figures for it
by plain SQL, written here without pigeon.ops (what the page must equal).

Per record, three obligations on three queues: ``grading`` (most complete, a few fail
permanently with two error classes), ``notify`` (a share fails, owned by comms-team),
``audit`` (left waiting, some in progress, some stuck with an expired lease).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from starlette.applications import Starlette

from pigeon.exceptions import PermanentError
from pigeon.jobs import effects, outbox, records
from pigeon.jobs.app import App
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.ops.dashboard import dashboard_routes
from pigeon.server.app import create_app
from pigeon.server.intake import Intake
from pigeon.storage.base import Database
from tests.server.conftest import operator_token

APP = App(default_owner="operations")
APP.queue("grading", max_workers=12, freshness=60, owner="grading-team")
APP.queue("notify", max_workers=4, freshness=300, owner="comms-team")
APP.queue("audit", max_workers=2, freshness=30)

KINDS = ("grading", "notify", "audit")


def ops_app(db: Database) -> Starlette:
    """The server with the operations page and API over ``db``, for APP, the operator's
    token required, no purge loop."""
    return create_app(
        Intake(db), routes=dashboard_routes(db, APP), operator=operator_token(), purge_interval=None
    )


class ProviderDown(Exception):
    pass


# Past this many records the scenario is a worked template of TEMPLATE records copied
# set-based (see `_replicate`): through the library, 10,000 records cost ~20 statements
# each, over two minutes of round trips on PostgreSQL; the copies take a few statements.
REPLICATE_ABOVE = 1_000
TEMPLATE = 200


def seed(db: Database, n_records: int, *, age: float = 600.0, chunk: int = 500) -> None:
    """``n_records`` records accepted ``age`` seconds ago, three obligations each, then
    worked: grading completes but for every 50th (two error classes), notify completes
    but for every 10th (failed), audit: a tenth in progress, a hundredth stuck, the rest
    waiting. Effects for completed gradings and an outbox row per record, half confirmed.

    Past ``REPLICATE_ABOVE`` records (a multiple of ``TEMPLATE``), ``TEMPLATE`` of them are
    made and worked through the library as above, and copied row for row, every column as
    the library wrote it, until there are ``n_records``."""
    if n_records > REPLICATE_ABOVE:
        if n_records % TEMPLATE:
            raise ValueError(f"a replicated scenario is a multiple of {TEMPLATE} records")
        seed(db, TEMPLATE, age=age, chunk=chunk)
        _replicate(db, n_records // TEMPLATE - 1)
        return
    start = time.time() - age
    manager = JobManager(db, APP, clock=lambda: time.time())
    ids: list[str] = []
    for base in range(0, n_records, chunk):
        with db.transaction() as tx:
            for i in range(base, min(n_records, base + chunk)):
                rid = f"r{i:06d}-{uuid.uuid4().hex[:6]}"
                ids.append(rid)
                specs = {k: JobSpec(k, f"do_{k}", {"record": rid}, max_attempts=1) for k in KINDS}
                records.accept(
                    tx,
                    kind="answer",
                    data={"i": i},
                    record_id=rid,
                    obligations=specs,
                    now=start + i * 0.001,
                )
                outbox.add(tx, "answers.received", {"record": rid}, now=start + i * 0.001)
    # grading: all claimed; every 50th fails (alternating classes), the rest succeed
    index = 0
    while True:
        jobs = manager.lease_jobs("grading", "w-grade", chunk, lease=60)
        if not jobs:
            break
        outcomes = []
        for job in jobs:
            index += 1
            if index % 50 == 0:
                error: BaseException = (
                    PermanentError("answer key missing") if index % 100 else ProviderDown("503")
                )
                outcomes.append(AttemptOutcome(job, error))
            else:
                outcomes.append(AttemptOutcome(job))
        manager.finish(outcomes)
    index = 0
    while True:
        jobs = manager.lease_jobs("notify", "w-notify", chunk, lease=60)
        if not jobs:
            break
        outcomes = []
        for job in jobs:
            index += 1
            fail = index % 10 == 0
            outcomes.append(AttemptOutcome(job, PermanentError("mailbox gone") if fail else None))
        manager.finish(outcomes)
    # audit: a tenth in progress (a live lease), a hundredth stuck (lease ran out)
    manager.lease_jobs("audit", "w-audit", max(1, n_records // 10), lease=3600)
    manager.lease_jobs("audit", "w-dead", max(1, n_records // 100), lease=0.01)
    with db.transaction() as tx:
        for rid in ids[: n_records // 2]:
            effects.effect_in(tx, "grade", rid, lambda tx: 1, now=time.time())
        tx.sql(_confirm_sql(db.backend), {"n": n_records // 2, "now": time.time()})
    time.sleep(0.05)


# Per table: the columns that name a record (made unique per copy with a suffix), the
# ones that hold a job id (shifted by a multiple of the template's largest), and the
# generated ids left to the database.
_SUFFIXED = {
    "pigeon_records": ("id",),
    "pigeon_obligations": ("record_id",),
    "pigeon_record_events": ("record_id",),
    "pigeon_jobs": ("record_id", "unique_key"),
    "pigeon_job_attempts": (),
    "pigeon_effects": ("key",),
    "pigeon_outbox": ("message_id",),
}
_SHIFTED = {
    "pigeon_jobs": ("id",),
    "pigeon_obligations": ("job_id",),
    "pigeon_job_attempts": ("job_id",),
}
_GENERATED = {"pigeon_record_events": "id", "pigeon_outbox": "id"}


def _columns(tx: Any, table: str) -> list[str]:
    """The table's columns as the database has them now (a later migration's too)."""
    if tx.backend == "sqlite":
        return [r["name"] for r in tx.sql(f"PRAGMA table_info({table})").fetchall()]
    rows = tx.sql(
        "SELECT column_name AS name FROM information_schema.columns "
        "WHERE table_name = %(t)s AND table_schema = current_schema() ORDER BY ordinal_position",
        {"t": table},
    ).fetchall()
    return [r["name"] for r in rows]


def _replicate(db: Database, copies: int) -> None:
    """``copies`` more of every scenario row, one INSERT ... SELECT per table: copy ``k``
    suffixes record ids with ``-c<k>`` and shifts job ids by ``k`` times the largest."""
    if copies < 1:
        return
    with db.transaction() as tx:
        span = int(tx.sql("SELECT max(id) AS m FROM pigeon_jobs").fetchone()["m"])
        for table, suffixed in _SUFFIXED.items():
            columns = [c for c in _columns(tx, table) if c != _GENERATED.get(table)]
            values = []
            for c in columns:
                if c in suffixed:
                    values.append(f"src.{c} || '-c' || copies.n")
                elif c in _SHIFTED.get(table, ()):
                    values.append(f"src.{c} + copies.n * {span}")
                else:
                    values.append(f"src.{c}")
            overriding = (
                " OVERRIDING SYSTEM VALUE"
                if table == "pigeon_jobs" and db.backend == "postgres"
                else ""
            )
            tx.sql(
                f"WITH RECURSIVE copies(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM copies "
                f"WHERE n < {int(copies)}) "
                f"INSERT INTO {table} ({', '.join(columns)}){overriding} "
                f"SELECT {', '.join(values)} FROM {table} AS src, copies",
                {},
            )
        if db.backend == "postgres":  # explicit ids: the identity goes on after them
            tx.sql(
                "SELECT setval(pg_get_serial_sequence('pigeon_jobs', 'id'), "
                "(SELECT max(id) FROM pigeon_jobs))",
                {},
            )


def _confirm_sql(backend: str) -> str:
    p = (lambda k: f"%({k})s") if backend == "postgres" else (lambda k: f":{k}")
    return (
        f"UPDATE pigeon_outbox SET published_at = {p('now')} WHERE id IN "
        f"(SELECT id FROM pigeon_outbox ORDER BY id LIMIT {p('n')})"
    )


def truth(db: Database, now: float, window: float) -> dict[str, Any]:
    """The database's figures for the scenario by plain GROUP BYs over whole tables."""
    p = (lambda k: f"%({k})s") if db.backend == "postgres" else (lambda k: f":{k}")
    since = now - window
    params = {"now": now, "since": since}
    with db.transaction() as tx:
        rec = tx.sql(
            "SELECT count(*) AS received, "
            "sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) AS completed "
            f"FROM pigeon_records WHERE created_at >= {p('since')}",
            params,
        ).fetchone()
        obl = tx.sql(
            "SELECT o.name, o.status, "
            "sum(CASE WHEN j.status = 'reserved' THEN 1 ELSE 0 END) AS running, count(*) AS n "
            "FROM pigeon_obligations o LEFT JOIN pigeon_jobs j ON j.id = o.job_id "
            "GROUP BY o.name, o.status",
            {},
        ).fetchall()
        jobs = tx.sql(
            "SELECT queue, CASE "
            f"WHEN status = 'queued' AND scheduled_at <= {p('now')} THEN 'ready' "
            "WHEN status = 'queued' THEN 'delayed' "
            f"WHEN status = 'reserved' AND reserved_until >= {p('now')} THEN 'reserved' "
            "WHEN status = 'reserved' THEN 'stuck' ELSE status END AS state, count(*) AS n "
            "FROM pigeon_jobs GROUP BY 1, 2",
            params,
        ).fetchall()
        failed = tx.sql(
            "SELECT owner, queue, last_error FROM pigeon_jobs WHERE status = 'failed'", {}
        ).fetchall()
        attempts = tx.sql(
            "SELECT j.queue, CASE WHEN a.outcome = 'succeeded' THEN 'succeeded' ELSE 'failed' "
            "END AS outcome, count(*) AS n FROM pigeon_job_attempts a "
            "JOIN pigeon_jobs j ON j.id = a.job_id "
            f"WHERE a.finished_at >= {p('hour')} GROUP BY 1, 2",
            {"hour": now - 3600},
        ).fetchall()
        effects_n = tx.sql("SELECT count(*) AS n FROM pigeon_effects", {}).fetchone()["n"]
        out = tx.sql(
            "SELECT count(*) AS n, count(published_at) AS confirmed FROM pigeon_outbox", {}
        ).fetchone()
    obligations: dict[str, dict[str, int]] = {}
    for row in obl:
        entry = obligations.setdefault(
            row["name"],
            {s: 0 for s in ("pending", "in_progress", "completed", "failed", "cancelled")},
        )
        if row["status"] == "pending":
            entry["in_progress"] += int(row["running"])
            entry["pending"] += int(row["n"]) - int(row["running"])
        else:
            entry[row["status"]] += int(row["n"])
    queues: dict[str, dict[str, int]] = {}
    for row in jobs:
        queues.setdefault(row["queue"], {})[row["state"]] = int(row["n"])
    for queue in queues.values():
        queue["last_hour.succeeded"] = queue["last_hour.failed"] = 0
    for row in attempts:
        queues[row["queue"]][f"last_hour.{row['outcome']}"] = int(row["n"])
    groups: dict[tuple[str, str, str], int] = {}
    for row in failed:
        # the exception's type name, after pigeon's own prefixes
        text = (row["last_error"] or "-").rsplit("; last error: ", 1)[-1]
        text = text.removeprefix("permanent error: ")
        key = (row["owner"] or "-", row["queue"], text.split(":", 1)[0].rsplit(".", 1)[-1])
        groups[key] = groups.get(key, 0) + 1
    return {
        "records": {
            "received": int(rec["received"]),
            "completed": int(rec["completed"] or 0),
        },
        "obligations": obligations,
        "queues": queues,
        "failed_groups": groups,
        "effects": int(effects_n),
        "outbox": {"created": int(out["n"]), "confirmed": int(out["confirmed"])},
    }


def figures(view: dict[str, Any]) -> dict[str, int]:
    """The integer figures of an overview, by the labels the page puts on them."""
    found: dict[str, int] = {}
    for key in ("received", "completed", "open"):
        found[f"records.{key}"] = view["records"][key]
    for name, o in view["obligations"].items():
        for status in ("pending", "in_progress", "completed", "failed", "cancelled"):
            found[f"obligations.{name}.{status}"] = o[status]
    for q in view["queues"]:
        for state in ("ready", "delayed", "reserved", "stuck"):
            found[f"queues.{q['queue']}.{state}"] = q[state]
        for outcome in ("succeeded", "failed"):
            found[f"queues.{q['queue']}.last_hour.{outcome}"] = q["last_hour"][outcome]
    for g in view["failed"]["groups"]:
        found[f"failed.{g['owner']}.{g['queue']}.{g['error_class']}"] = g["count"]
    found["failed.total"] = view["failed"]["total"]
    rec = view["reconciliation"]
    found["reconciliation.without_job"] = rec["without_job"]["count"]
    for name, n in rec["obligations_created"].items():
        found[f"reconciliation.created.{name}"] = n
        found[f"reconciliation.completed.{name}"] = rec["obligations_completed"].get(name, 0)
    found["reconciliation.created_total"] = rec["created_total"]
    found["reconciliation.completed_total"] = rec["completed_total"]
    found["reconciliation.effects_recorded"] = rec["effects_recorded"]
    found["reconciliation.notifications.created"] = rec["notifications"]["created"]
    found["reconciliation.notifications.confirmed"] = rec["notifications"]["confirmed"]
    found["relay.pending"] = view["relay"]["pending"]
    return found
