"""Appending operations: the body of the enqueue's transaction.

An operation is written as a new row, or folded into its entity's unsent tail when
coalescing allows (`pigeon.edge.coalesce.fold_into`). Everything here runs inside the
caller's open write transaction ``tx`` and keeps the store's invariants: on each entity,
exactly the earliest queued (live or dead) operation has ``head = 1``; and
``edge_state.clock`` is never below a stored stamp (operations are stamped here, in queue
order, against the file's floor: see `pigeon.edge.sqlite.stamps`).

Read top to bottom: `write` is the transaction (stamp a run, write it, take the late
joiners, record the clock); a run of one goes through `append_one`, a longer run through
`append_run`, which writes the operations on entities with nothing queued with one
executemany and the others through `append_one` in their turn.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from pigeon.core.operation import OpStatus
from pigeon.edge.coalesce import Fold, Step, fold_into
from pigeon.edge.queue_store import Built, More, NewOp, from_new
from pigeon.edge.sqlite.rows import PAYLOAD_AD, to_operation, was_sent
from pigeon.edge.sqlite.stamps import FileClock
from pigeon.storage.sqlite import SQLiteTx


def write(
    tx: SQLiteTx, items: list[NewOp], more: More, *, coalesce: bool, clock: FileClock
) -> list[Built | BaseException]:
    """``items`` and any late joiners (``more()``, until it has none) into the open
    transaction ``tx``, stamped in queue order above the file's clock, which then records
    the last stamp; extends ``items`` with the late joiners."""
    built: list[Built | BaseException] = []
    saved = 0
    clock.observe_floor(tx)
    while True:
        run = items[len(built) :]
        for new in run:  # stamped before writing: seq order, then, is stamp order
            new.clock = clock.next()
        if len(run) == 1:
            op, n = append_one(tx, run[0], coalesce=coalesce)
            built.append(op)
            saved += n
        else:
            saved += append_run(tx, run, built, coalesce=coalesce)
        extra = more()
        if not extra:
            break
        items.extend(extra)
    clock.record(tx, items[-1].clock, saved)
    return built


def append_one(tx: SQLiteTx, new: NewOp, *, coalesce: bool) -> tuple[Built, int]:
    """Store ``new`` (folded into its entity's tail if allowed). Returns what builds the
    operation as stored (called after the commit, outside the writer's lock) and how
    many sends coalescing saved."""
    tail = tx.fetchone("queued_tail", {"entity": new.entity})
    if coalesce and tail is not None:
        incoming = Step(new.type, new.entity, new.payload, new.endpoint, new.method)
        last = Step(
            tail["type"],
            tail["entity"],
            # Opened: no rule keeps the tail's payload today, but one that did must not
            # store a sealed value sealed again.
            tx.cipher.open(tail["payload"], *PAYLOAD_AD, tail["id"]),
            tail["endpoint"],
            tail["method"],
            sent=was_sent(tail),
        )
        verdict = fold_into(last, incoming)
        if verdict.fold is Fold.REPLACE:
            assert verdict.step is not None
            step = verdict.step
            params = {
                "seq": tail["seq"],
                "type": step.type,
                "payload": tx.cipher.seal_binary(step.payload, *PAYLOAD_AD, tail["id"]),
                "endpoint": step.endpoint,
                "method": step.method,
                "clock": new.clock,
            }
            tx.execute("fold_op", params)
            return functools.partial(to_operation, {**tail, **params}, tx.cipher), 1
        if verdict.fold is Fold.DROP:
            tx.execute("delete_op", {"seq": tail["seq"]})
            return functools.partial(from_new, new, 0, OpStatus.COALESCED), 2
    params = {
        "id": new.id,
        "idempotency_key": new.idempotency_key,
        "type": new.type,
        "entity": new.entity,
        "endpoint": new.endpoint,
        "method": new.method,
        "payload": tx.cipher.seal_binary(new.payload, *PAYLOAD_AD, new.id),
        "created_at": new.created_at,
        "clock": new.clock,
        "base_version": new.base_version,
        "head": 1 if tail is None else 0,
    }
    seq = tx.execute("insert_op", params).lastrowid
    assert seq is not None
    return functools.partial(from_new, new, seq, OpStatus.PENDING), 0


def append_run(
    tx: SQLiteTx, run: Sequence[NewOp], built: list[Built | BaseException], *, coalesce: bool
) -> int:
    """Several operations (a group commit's batch) in a few statements instead of two
    each: one query finds which of their entities have queued operations, and the rest
    (new entities, each once in the run) go in with one executemany as heads.
    Why it pays: every statement hands the interpreter lock to the threads preparing
    the next batch and must wait to get it back, so under contention the leader's
    statement count, not their work, sets the pace. An operation whose entity has a
    queued operation, or appeared earlier in the run, goes through ``append_one`` in its
    turn, after the rows before it are written, so seq still follows queue order and
    coalescing sees exactly what it would see one enqueue at a time. Appends to
    ``built``; returns how many sends coalescing saved."""
    names = json.dumps(list({new.entity: None for new in run}))
    busy = {r["entity"] for r in tx.fetchall("queued_entities", {"entities": names})}
    seen: set[str] = set()
    heads: list[NewOp] = []
    saved = 0
    for new in run:
        if new.entity in busy or new.entity in seen:
            insert_heads(tx, heads, built)
            heads = []
            op, n = append_one(tx, new, coalesce=coalesce)
            built.append(op)
            saved += n
        else:
            heads.append(new)
        seen.add(new.entity)
    insert_heads(tx, heads, built)
    return saved


def insert_heads(tx: SQLiteTx, heads: Sequence[NewOp], built: list[Built | BaseException]) -> None:
    """Operations on entities with no queued operation: the named single-row ``insert_head``,
    run over all of them by one executemany. Measured against one ``INSERT ... SELECT
    FROM json_each(?)`` of a JSON array of the rows (each ``->>`` parses its row's JSON
    again) on the 8-thread enqueue benchmark: executemany was 3-7% faster, as fast as the
    multi-row VALUES statement it replaces, which was built by hand for each run length."""
    if not heads:
        return
    seal = tx.cipher.seal_binary
    rows = [
        (new.id, new.idempotency_key, new.type, new.entity, new.endpoint, new.method,
         seal(new.payload, *PAYLOAD_AD, new.id), new.created_at, new.clock, new.created_at,
         new.base_version)
        for new in heads
    ]  # fmt: skip
    tx.conn.executemany(tx.queries["insert_head"], rows)  # positional: no dict per row
    last: int = tx.tuples("last_seq").fetchone()[0]
    # Under the write lock, one row after another: SQLite gives each the greatest rowid
    # so far plus one, so the rows hold consecutive seqs ending at the last one.
    first = last - len(heads) + 1
    built.extend(
        functools.partial(from_new, new, first + i, OpStatus.PENDING) for i, new in enumerate(heads)
    )
