"""The SQLite claim's cost does not grow with the backlog: it reads the ready jobs in due
order from their index and stops at the jobs it takes (eligible: of a task and payload
version the claimer knows), instead of reading and sorting every due job of the queue.
Counted in SQLite VM steps (a progress handler), not in seconds: the machine's load
cannot move it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from pigeon.storage.queries import load_queries
from pigeon.storage.server import open_server_db

CLAIM = load_queries("sqlite", "jobs")["job_claim"]
# Jobs of the queue, oldest first: of a task the claimer lacks (left, like a task a
# deploy adds), then ready ones it knows; every 100th of the first 1,000 reserved with an
# expired lease (a few, whatever the backlog).
FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
INSERT INTO pigeon_jobs (queue, task, payload, status, max_attempts, created_at,
                         budget_start, scheduled_at, reserved_until, attempts)
SELECT 'q', CASE WHEN i <= 20 THEN 'added' ELSE 't' || (i % 5) END, '{}',
       CASE WHEN i % 100 = 0 AND i <= 1000 THEN 'reserved' ELSE 'queued' END, 5, i, i, i,
       CASE WHEN i % 100 = 0 AND i <= 1000 THEN 1.0 END,
       CASE WHEN i % 100 = 0 AND i <= 1000 THEN 1 ELSE 0 END
FROM n
"""
KNOWN = json.dumps({f"t{i}": 1 for i in range(5)})


def _claim(path: Path, backlog: int) -> tuple[list[int], int]:
    """The ids a claim of 8 takes from a backlog of ``backlog`` due jobs, and the VM
    steps (in thousands) it took."""
    open_server_db(str(path)).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(FILL, {"count": backlog})
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        conn.execute("BEGIN")
        conn.set_progress_handler(count, 1000)
        params = {"queue": "q", "worker": "w", "token": "t", "now": 1e9, "until": 2e9}
        rows = conn.execute(CLAIM, {**params, "n": 8, "versions": KNOWN}).fetchall()
        conn.set_progress_handler(None, 0)
        conn.execute("ROLLBACK")
        return sorted(r[0] for r in rows), steps
    finally:
        conn.close()


def test_a_claim_reads_what_it_takes_not_the_whole_backlog(tmp_path: Path) -> None:
    small, small_steps = _claim(tmp_path / "small.db", 1_000)
    large, large_steps = _claim(tmp_path / "large.db", 50_000)
    # The same jobs: the oldest known ones, the unknown task's passed over; the expired
    # lease among them (job 100) is not before them in due order.
    assert small == large == list(range(21, 29))
    assert large_steps <= 2 * small_steps + 5, (small_steps, large_steps)


def test_an_expired_lease_due_first_is_taken_first(tmp_path: Path) -> None:
    open_server_db(str(tmp_path / "s.db")).close()
    conn = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        conn.execute(FILL, {"count": 300})
        conn.execute("UPDATE pigeon_jobs SET scheduled_at = 0 WHERE id IN (100, 200)")
        params = {"queue": "q", "worker": "w", "token": "t", "now": 1e9, "until": 2e9}
        rows = conn.execute(CLAIM, {**params, "n": 3, "versions": KNOWN}).fetchall()
    finally:
        conn.close()
    assert sorted(r[0] for r in rows) == [21, 100, 200]
