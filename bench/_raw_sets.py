"""The set-based intake's raw SQL for one batch of creates on each backend, given an open
connection: the named blocks pigeon's set path runs (the keys read, the notes, the ledger
rows, the claims completed with their answers) and the least Python that can feed them.

Run for each request by the raw apps (bench/_raw_intake_app.py's ``set_app``,
bench/_raw_pg_app.py) and in one thread with no HTTP by bench/_raw_cpu.py, so the
throughput ceilings and the CPU row measure the same statements.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from bench._raw_batch import Entries, answered, planned
from pigeon.reference.schema import REFERENCE, attach
from pigeon.server.idempotency import CLAIM_WAIT, IdempotencyPolicy
from pigeon.storage.server import open_server_db, server_queries

if TYPE_CHECKING:
    import psycopg

PRINCIPAL = "anonymous"
SQLITE_SQL = {**server_queries("sqlite"), **REFERENCE.queries("sqlite")}
POSTGRES_SQL = {**server_queries("postgres"), **REFERENCE.queries("postgres")}
_POLICY = IdempotencyPolicy()
_WAIT = f"{round(CLAIM_WAIT * 1000)}ms"  # as the intake bounds a key's wait


def migrated(db: str) -> None:
    """``db`` (a SQLite path or a PostgreSQL URL) made or brought up to date by pigeon's
    migrations and the reference notes app's: the tables and indexes these batches write."""
    made = open_server_db(db)
    attach(made)
    made.close()


class SeenTwice(RuntimeError):
    """A batch holds a key the database has: the benchmarks send fresh keys only."""


def sqlite_batch(conn: sqlite3.Connection, entries: Entries, now: float) -> list[dict[str, Any]]:
    """A batch of creates inside the caller's write transaction: a multi-row statement for
    the notes, a one-row statement stepped for each row by ``executemany`` for the others,
    as pigeon's SQLite store runs them."""
    claims, notes, datas = planned(entries)
    keys = {"principal": PRINCIPAL, "keys": json.dumps([c[0] for c in claims])}
    if conn.execute(SQLITE_SQL["claims_get_many"], keys).fetchall():
        raise SeenTwice("a key seen twice: the benchmark sends fresh keys")
    made = {
        note_id: version
        for note_id, version, _ in conn.execute(
            SQLITE_SQL["notes_create_many"],
            {"principal": PRINCIPAL, "notes": json.dumps(notes), "now": now},
        )
    }
    ledger, answers, out = answered(entries, datas, made)
    conn.executemany(SQLITE_SQL["ledger_append_many"], [(*e, PRINCIPAL, now) for e in ledger])
    kept, expires = now + _POLICY.response_retention, now + _POLICY.claim_retention
    done = conn.executemany(
        SQLITE_SQL["claims_store_many"],
        [
            (PRINCIPAL, *c, 201, "[]", b, now, now, kept, expires)
            for c, b in zip(claims, answers, strict=True)
        ],
    ).rowcount
    assert done == len(entries)
    return out


def postgres_batch(conn: psycopg.Connection[Any], entries: Entries) -> list[dict[str, Any]]:
    """A batch of creates in a transaction of its own, in two round trips where pigeon
    takes three (pipeline mode: the keys read goes with the notes, the last two statements
    with the COMMIT), prepared as pigeon's are."""
    claims, notes, datas = planned(entries)
    now = time.time()
    mine = {"principal": PRINCIPAL, "now": now}
    with conn.pipeline() as pipeline, conn.transaction():
        keys = json.dumps([c[0] for c in claims])
        seen = conn.execute(POSTGRES_SQL["claims_get_many"], {**mine, "keys": keys})
        created = conn.execute(
            POSTGRES_SQL["notes_create_many"], {**mine, "notes": json.dumps(notes)}
        )
        pipeline.sync()
        if seen.fetchall():
            raise SeenTwice("a key seen twice: the benchmark sends fresh keys")
        made = {note_id: version for note_id, version, _ in created.fetchall()}
        ledger, answers, out = answered(entries, datas, made)
        stored = [[*claim, 201, "[]", text] for claim, text in zip(claims, answers, strict=True)]
        conn.execute(POSTGRES_SQL["ledger_append_many"], {**mine, "rows": json.dumps(ledger)})
        conn.execute(
            POSTGRES_SQL["claims_store_many"],
            {**mine, "claims": json.dumps(stored), "claim_wait": _WAIT, "created_at": now,
             "response_expires_at": now + _POLICY.response_retention,
             "claim_expires_at": now + _POLICY.claim_retention},
        )  # fmt: skip
    return out
