"""A group commit's batch written in one go (few statements) leaves exactly the file that
writing its operations one at a time leaves: same rows, order, heads, folds, results."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.queue_store import NewOp

TYPES = ["create", "update", "delete", "publish"]
Edit = tuple[str, str]  # (type, entity)


def _new(queue: OfflineQueue, n: int, type_: str, entity: str) -> NewOp:
    return NewOp(
        id=f"00000000-0000-7000-8000-{n:012d}",
        idempotency_key=f"key-{n}",
        type=type_,
        entity=entity,
        payload=f'{{"n":{n}}}',
        endpoint=f"/x/{entity}",
        method="PUT",
        created_at=1000.0 + n / 7,
        base_version=None,
    )


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT seq, id, idempotency_key, type, entity, payload, endpoint, method,"
            " created_at, clock, next_attempt_at, status, head, dispatches"
            " FROM operations ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


def _state(path: Path) -> tuple[Any, ...]:
    conn = sqlite3.connect(path)
    try:
        return tuple(conn.execute("SELECT clock, coalesced FROM edge_state").fetchone())
    finally:
        conn.close()


def _built(outcomes: list[Any]) -> list[tuple[Any, ...]]:
    ops = [o() for o in outcomes]
    return [(o.id, o.type, o.entity, o.payload, o.status, o.seq, o.clock) for o in ops]


edits = st.lists(
    st.tuples(st.sampled_from(TYPES), st.sampled_from(["note:a", "note:b", "note:c", "d"])),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(before=edits, sent=st.integers(0, 3), batch=edits, coalesce=st.booleans())
def test_a_run_equals_one_at_a_time(
    before: list[Edit], sent: int, batch: list[Edit], coalesce: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "one.db", Path(tmp) / "run.db"]
        # One still clock, one node: both issue the same stamps if they stamp in one order.
        queues = [
            OfflineQueue(
                p,
                QueueOptions(coalesce=coalesce, durability="normal"),
                now=lambda: 1e3,
                node_id="n",
            )
            for p in paths
        ]
        try:
            results = []
            for queue in queues:
                for n, (type_, entity) in enumerate(before):
                    queue.store.append([_new(queue, n, type_, entity)], tuple)
                queue.next_batch(sent)  # some tails in flight: never folded into
            one, run = queues
            news = [_new(one, 100 + n, t, e) for n, (t, e) in enumerate(batch)]
            results.append(_built([one.store.append([new], tuple)[0] for new in news]))
            results.append(_built(run.store.append(news, tuple)) if news else [])
            assert results[0] == results[1]
        finally:
            for queue in queues:
                queue.close()
        assert _rows(paths[0]) == _rows(paths[1])
        (clock_one, saved_one), (clock_run, saved_run) = _state(paths[0]), _state(paths[1])
        assert saved_one == saved_run
        assert clock_run == clock_one  # each records the last stamp it issued


def test_a_run_of_new_entities_is_one_named_statement_run_over_them(tmp_path: Path) -> None:
    """Five new entities: one look for live ones, then the named single-row statement,
    executemany'd (its text as written in the SQL file: no statement built by hand)."""
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as queue:
        queue.enqueue("create", "note:old", {})
        statements: list[str] = []
        conn = queue.store.db.connection()
        news = [_new(queue, n, "update", f"note:{n}") for n in range(5)]
        conn.set_trace_callback(statements.append)
        ops = [built() for built in queue.store.append(news, tuple)]  # type: ignore[operator]
        conn.set_trace_callback(None)
        inserts = [s for s in statements if "INSERT INTO operations" in s]
        named = queue.store.db.queries["insert_head"].partition("VALUES")[0]
        assert len(inserts) == 5  # the trace shows each row's run, its values bound
        assert {s.partition("VALUES")[0] for s in inserts} == {named}
        assert sum("live_entities" in s or "json_each" in s for s in statements) == 1
        assert [o.seq for o in ops] == [2, 3, 4, 5, 6]
        assert [o.seq for o in queue.pending] == [1, 2, 3, 4, 5, 6]
        assert [o.id for o in queue.pending][1:] == [n.id for n in news]
