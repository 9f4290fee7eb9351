"""SQLite rows as dicts (``pigeon.storage.sqlite._dict_row``): the column names are made
once per statement, not per row, and never lent to another statement's rows."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pigeon.storage.sqlite import connect


def test_rows_of_statements_read_in_turn_each_carry_their_own_column_names(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rows.db"
    with contextlib.closing(connect(path)) as conn:
        conn.execute("CREATE TABLE a (x INTEGER, y TEXT)")
        conn.execute("CREATE TABLE b (p TEXT, q INTEGER, r REAL)")
        for i in range(200):
            conn.execute("INSERT INTO a VALUES (?, 'y')", (i,))
            conn.execute("INSERT INTO b VALUES ('p', ?, 0.5)", (i,))

    def read_in_turn() -> int:
        with contextlib.closing(connect(path)) as conn:
            first, second = conn.execute("SELECT * FROM a"), conn.execute("SELECT * FROM b")
            for i in range(200):
                assert first.fetchone() == {"x": i, "y": "y"}
                assert second.fetchone() == {"p": "p", "q": i, "r": 0.5}
        return 200

    with ThreadPoolExecutor(3) as pool:  # and on three threads at once
        assert [f.result() for f in [pool.submit(read_in_turn) for _ in range(3)]] == [200] * 3
