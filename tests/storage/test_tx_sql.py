"""``Tx.sql``: an application's own statements in pigeon's transaction, on each backend."""

from __future__ import annotations

import pytest

from pigeon.jobs.effects import effect
from pigeon.storage.base import Tx
from pigeon.storage.server import open_server_db


def _own_table(tx: Tx) -> None:
    tx.sql("CREATE TABLE IF NOT EXISTS grades (answer_id TEXT PRIMARY KEY, score INTEGER)")


def _param(tx: Tx, name: str) -> str:
    return f":{name}" if tx.backend == "sqlite" else f"%({name})s"


def test_an_effect_writes_the_apps_own_table_once_and_rolls_back_with_its_transaction(
    server_db_url: str,
) -> None:
    # The README's jobs sample wrote its grade with `tx`, which took only pigeon's named
    # queries: `tx.execute("CREATE TABLE ...")` was a KeyError, recorded as the job's error.
    db = open_server_db(server_db_url)
    try:
        with db.transaction() as tx:
            _own_table(tx)

        def write_grade(tx: Tx) -> int:
            a, s = _param(tx, "a"), _param(tx, "s")
            tx.sql(f"INSERT INTO grades (answer_id, score) VALUES ({a}, {s})", {"a": "a1", "s": 3})
            return 3

        assert effect(db, "grade", "answer:a1", write_grade) == 3
        assert effect(db, "grade", "answer:a1", write_grade) == 3  # stored, not run again
        with pytest.raises(RuntimeError), db.transaction() as tx:
            tx.sql(f"INSERT INTO grades VALUES ({_param(tx, 'a')}, 1)", {"a": "gone"})
            raise RuntimeError("the transaction fails: its own rows go with it")
        with db.transaction() as tx:
            rows = tx.sql("SELECT answer_id, score FROM grades ORDER BY answer_id").fetchall()
        assert [(r["answer_id"], r["score"]) for r in rows] == [("a1", 3)]
    finally:
        db.close()
