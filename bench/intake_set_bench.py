"""The batch intake in process on SQLite, batches of 100 creates, beside the same rows
written by hand, in one run: pigeon's set-based path (`pigeon.server.intake_set`, the
reference notes app's ``create_notes``) against the hand-written set-based SQL (the same
named blocks, run as the intake runs them, one call each, straight on sqlite3, with the
least Python that can feed them: the raw limit, and the ceiling of that path), and the
per-operation path against the hand-written per-operation SQL (claim, savepoint, note,
ledger row, stored response per operation, as bench/_raw_intake_app.py runs them), and
the two paths against each other; and the two paths on PostgreSQL, timed on the wall
clock (a database of its own on the server PIGEON_BENCH_PG_DSN names,
`bench._servers.pg_database`).

Durability "normal" on purpose (an fsync per commit would hide the CPU this measures), and
timed in CPU seconds of this one thread (``time.process_time``): on a shared machine wall
time mostly measures the neighbours. The cases run interleaved, round by round, so a
change in the machine's load falls on all of them alike. Each batch is built (bodies,
keys) before its clock starts; the answer's encoding on the wire is not measured here
(bench/e2e_bench.py measures the server as a whole).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._report import Row, rate, row
from bench._servers import pg_database
from bench._writers import PAYLOAD
from pigeon.core.wire import ETAG
from pigeon.reference.notes import NOTE_SCHEMA, create_note, validate_note
from pigeon.reference.notes_many import create_notes
from pigeon.reference.schema import REFERENCE, attach
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.intake import Intake, OperationRequest
from pigeon.storage.server import open_server_db, server_queries

BATCH = 100
ROUNDS = 20
Entry = tuple[str, dict[str, Any]]  # (idempotency key, body)


def _entries() -> list[Entry]:
    keys = [uuid.uuid4().hex for _ in range(BATCH)]
    return [(k, {"id": k, **PAYLOAD}) for k in keys]


def _database(path: Path) -> None:
    db = open_server_db(path, durability="normal")  # pigeon's schema, indexes included
    attach(db)  # and the reference notes app's
    db.close()


class _Hand:
    """The same rows written by hand on sqlite3 (WAL, synchronous=NORMAL, as pigeon's
    durability "normal"), one transaction per batch."""

    def __init__(self, path: Path) -> None:
        self.sql = {**server_queries("sqlite"), **REFERENCE.queries("sqlite")}
        self.policy = IdempotencyPolicy()
        _database(path)
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")

    def step(self, batches: list[list[Entry]]) -> float:
        started = time.process_time()
        for entries in batches:
            now = time.time()
            self.conn.execute("BEGIN IMMEDIATE")
            self.batch(entries, now)
            self.conn.execute("COMMIT")
        return time.process_time() - started

    def batch(self, entries: list[Entry], now: float) -> None:
        raise NotImplementedError

    @staticmethod
    def fingerprint(body: dict[str, Any]) -> str:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(f"POST\n/notes\n{canonical}".encode()).hexdigest()

    @staticmethod
    def answer(note_id: str, version: int, data: dict[str, Any], now: float) -> str:
        body = {"id": note_id, "version": version, "data": data, "clock": "0", "updated_at": now}
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def close(self) -> None:
        self.conn.close()


class _HandSet(_Hand):
    """Set-based: the keys read, the notes, the ledger rows and the claims completed with
    their stored answers, one call each (the claims' by ``executemany``)."""

    def batch(self, entries: list[Entry], now: float) -> None:
        sql, policy = self.sql, self.policy
        claims, notes, datas = [], [], []
        for key, body in entries:
            claims.append([key, self.fingerprint(body), "POST", "/notes", key])
            data = {k: v for k, v in body.items() if k != "id"}
            datas.append(data)
            notes.append([body["id"], json.dumps(data), "0"])
        keys = json.dumps([c[0] for c in claims])
        assert not self.conn.execute(
            sql["claims_get_many"], {"principal": "p", "keys": keys}
        ).fetchall()
        made = {
            note_id: version
            for note_id, version, _ in self.conn.execute(
                sql["notes_create_many"], {"principal": "p", "notes": json.dumps(notes), "now": now}
            )
        }
        ledger, answers = [], []
        for (key, body), data in zip(entries, datas, strict=True):
            note_id = body["id"]
            version = made[note_id]
            ledger.append([key, key, f"note:{note_id}", "POST", 201, version, "0"])
            headers = [[ETAG.lower(), f'"{version}"'], ["location", f"/notes/{note_id}"]]
            answers.append((headers, self.answer(note_id, version, data, now)))
        self.conn.executemany(sql["ledger_append_many"], [(*e, "p", now) for e in ledger])
        kept, expires = now + policy.response_retention, now + policy.claim_retention
        done = self.conn.executemany(
            sql["claims_store_many"],
            [("p", *c, 201, json.dumps(h, separators=(",", ":")), b, now, now, kept, expires)
             for c, (h, b) in zip(claims, answers, strict=True)],
        ).rowcount  # fmt: skip
        assert done == len(entries)


class _HandPerOp(_Hand):
    """Per operation: its claim, a savepoint, its note, its ledger row, its stored answer."""

    def batch(self, entries: list[Entry], now: float) -> None:
        sql, policy, conn = self.sql, self.policy, self.conn
        for key, body in entries:
            claim = {
                "principal": "p", "idem_key": key, "fingerprint": self.fingerprint(body),
                "method": "POST", "path": "/notes", "operation_id": key, "lock_token": key,
                "locked_until": now + policy.lock_timeout,
                "claim_expires_at": now + policy.claim_retention, "now": now,
            }  # fmt: skip
            assert conn.execute(sql["claim_insert"], claim).fetchone() is not None
            conn.execute("SAVEPOINT op")
            data = {k: v for k, v in body.items() if k != "id"}
            note = conn.execute(
                sql["note_create"],
                {"principal": "p", "id": body["id"], "data": json.dumps(data), "clock": "0",
                 "now": now},
            ).fetchone()  # fmt: skip
            version = note[2]
            conn.execute(
                sql["ledger_append"],
                {"idempotency_key": key, "principal": "p", "operation_id": key,
                 "entity": f"note:{body['id']}", "method": "POST", "status": 201,
                 "version": version, "clock": "0", "now": now},
            )  # fmt: skip
            headers = json.dumps([[ETAG.lower(), f'"{version}"'], ["location", f"/notes/{key}"]])
            done = conn.execute(
                sql["claim_complete"],
                {"principal": "p", "idem_key": key, "lock_token": key, "status": 201,
                 "response_headers": headers,
                 "response_body": self.answer(body["id"], version, data, now),
                 "body_format": "json", "now": now,
                 "response_expires_at": now + policy.response_retention},
            ).fetchone()  # fmt: skip
            assert done is not None
            conn.execute("RELEASE op")


class _Pigeon:
    """The intake in process, the notes' create route declared as the reference app
    declares it (schema and checks before the claim), with its set handler or without;
    ``checks=False`` leaves the declared checks out, which the hand-written rows do not
    make either (what the set path's own code costs)."""

    def __init__(
        self, path: Path | str, *, many: bool, checks: bool = True, wall: bool = False
    ) -> None:
        self.db = open_server_db(path, durability="normal")
        attach(self.db)
        # PostgreSQL's rows are timed on the wall clock: its round trips are what it costs.
        self.clock = time.perf_counter if wall else time.process_time
        self.intake = Intake(self.db)
        self.intake.add_operation(
            "POST",
            "/notes",
            create_note,
            request_schema=NOTE_SCHEMA if checks else None,
            validate=validate_note if checks else None,
            many=create_notes if many else None,
        )

    def step(self, batches: list[list[Entry]]) -> float:
        ops = [
            [OperationRequest("POST", "/notes", body, key, key) for key, body in entries]
            for entries in batches
        ]
        started = self.clock()
        for batch in ops:
            results = self.intake.execute_batch("p", list(batch))
        spent = self.clock() - started
        assert all(r.status == 201 for r in results), results[0]
        return spent

    def close(self) -> None:
        self.db.close()


Case = Callable[[Path], "_Hand | _Pigeon"]
CASES: dict[str, Case] = {
    "hand-set": _HandSet,
    "hand-per-op": _HandPerOp,
    "set": lambda p: _Pigeon(p, many=True),
    "per-op": lambda p: _Pigeon(p, many=False),
    "set, no checks": lambda p: _Pigeon(p, many=True, checks=False),
}


def measure(batches_per_round: int, rounds: int = ROUNDS) -> dict[str, float]:
    """Operations per CPU second of each case, interleaved round by round (the first
    round warms up and is not counted)."""
    spent = dict.fromkeys(CASES, 0.0)
    with tempfile.TemporaryDirectory(prefix="pigeon-bench-") as tmp:
        cases = {name: make(Path(tmp) / f"{name}.db") for name, make in CASES.items()}
        try:
            for r in range(rounds + 1):
                for name, case in cases.items():
                    took = case.step([_entries() for _ in range(batches_per_round)])
                    spent[name] += took if r else 0.0
        finally:
            for case in cases.values():
                case.close()
    ops = rounds * batches_per_round * BATCH
    return {name: rate(ops, seconds) for name, seconds in spent.items()}


def postgres(batches_per_round: int, rounds: int = ROUNDS) -> dict[str, float]:
    """Operations per second (wall) of the set-based and the per-operation path on a
    PostgreSQL database of their own (bench/intake_pg_bench.py's), interleaved."""
    spent = {"set": 0.0, "per-op": 0.0}
    with pg_database() as url:
        cases = {name: _Pigeon(url, many=name == "set", wall=True) for name in spent}
        try:
            for r in range(rounds + 1):
                for name, case in cases.items():
                    took = case.step([_entries() for _ in range(batches_per_round)])
                    spent[name] += took if r else 0.0
        finally:
            for case in cases.values():
                case.close()
    ops = rounds * batches_per_round * BATCH
    return {name: rate(ops, seconds) for name, seconds in spent.items()}


def run(*, quick: bool = False) -> list[Row]:
    rates = measure(2 if quick else 5)
    pg = postgres(1 if quick else 2, rounds=5 if quick else 10)
    unit = "ops/CPU s"
    return [
        row("intake in process on PostgreSQL, batches of 100, set-based vs per operation",
            pg["set"], pg["per-op"], unit="ops/s", baseline_name="same intake, per-operation path",
            target="report", ok=True),
        row("intake in process, batches of 100, set-based", rates["set"], rates["hand-set"],
            unit=unit, baseline_name="raw limit: hand-written set-based SQL",
            target=">= 0.9x", ok=rates["set"] >= 0.9 * rates["hand-set"]),
        row("same, the route's declared checks left out (schema, validate_note)",
            rates["set, no checks"], rates["hand-set"], unit=unit,
            baseline_name="raw limit: hand-written set-based SQL", target="report", ok=True),
        row("intake in process, batches of 100, set-based vs per operation", rates["set"],
            rates["per-op"], unit=unit, baseline_name="same intake, per-operation path",
            target="report", ok=True),
        row("intake in process, batches of 100, per operation", rates["per-op"],
            rates["hand-per-op"], unit=unit,
            baseline_name="raw limit: hand-written per-operation SQL", target="report", ok=True),
        row("raw limit: hand-written SQL, set-based vs per operation", rates["hand-set"],
            rates["hand-per-op"], unit=unit, baseline_name="hand-written per-operation SQL",
            target="report", ok=True),
    ]  # fmt: skip
