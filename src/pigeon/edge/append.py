"""Enqueue's writes: an operation into the file, folded into its entity's unsent tail when
coalescing allows. Everything here runs inside the caller's open write transaction ``tx``
and keeps the store's invariants: on each entity, exactly the earliest live operation has
``head = 1``; and ``edge_state.clock`` is never below a stored stamp (operations are
stamped here, in queue order, against the file's floor: see ``pigeon.edge.stamps``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pigeon.edge.coalesce import Fold, Step, decide
from pigeon.edge.operation import Operation, OpStatus
from pigeon.edge.rows import PAYLOAD_AD, to_operation, was_sent
from pigeon.edge.stamps import FileClock
from pigeon.storage.sqlite import SQLiteTx

Built = Callable[[], Operation]

# Hot path: every enqueue returns its payload decoded from the text it stored. That text is
# validate.encode_payload's, one JSON value with no whitespace around it, which raw_decode
# reads as json.loads would, without loads' checks and decode()'s two whitespace regexes
# (0.8 us instead of 1.9 for a typical payload).
_decode = json.JSONDecoder().raw_decode

_INSERT_HEADS: dict[int, str] = {}  # the insert_heads statement for n rows, by n


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a setattr call per field
class NewOp:
    """A validated operation on its way into the file (never changed once made)."""

    id: str
    idempotency_key: str
    type: str
    entity: str
    payload: str  # JSON text
    endpoint: str | None
    method: str | None
    created_at: float
    base_version: str | None
    clock: str = ""  # stamped inside the transaction that writes it (write_all)


def append(tx: SQLiteTx, new: NewOp, *, coalesce: bool) -> tuple[Built, int]:
    """Store ``new`` (folded into its entity's tail if allowed). Returns what builds the
    operation as stored (called after the commit, outside the writer's lock) and how
    many sends coalescing saved."""
    tail = tx.fetchone("live_tail", {"entity": new.entity})
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
        decision = decide(last, incoming)
        if decision.fold is Fold.REPLACE:
            assert decision.step is not None
            step = decision.step
            params = {
                "seq": tail["seq"],
                "type": step.type,
                "payload": tx.cipher.seal(step.payload, *PAYLOAD_AD, tail["id"]),
                "endpoint": step.endpoint,
                "method": step.method,
                "clock": new.clock,
            }
            tx.execute("fold_op", params)
            return functools.partial(to_operation, {**tail, **params}, tx.cipher), 1
        if decision.fold is Fold.DROP:
            tx.execute("delete_op", {"seq": tail["seq"]})
            return functools.partial(from_new, new, 0, OpStatus.COALESCED), 2
    params = {
        "id": new.id,
        "idempotency_key": new.idempotency_key,
        "type": new.type,
        "entity": new.entity,
        "endpoint": new.endpoint,
        "method": new.method,
        "payload": tx.cipher.seal(new.payload, *PAYLOAD_AD, new.id),
        "created_at": new.created_at,
        "clock": new.clock,
        "base_version": new.base_version,
        "head": 1 if tail is None else 0,
    }
    seq = tx.execute("insert_op", params).lastrowid
    assert seq is not None
    return functools.partial(from_new, new, seq, OpStatus.PENDING), 0


def write_all(
    tx: SQLiteTx,
    items: list[NewOp],
    more: Callable[[], Sequence[NewOp]],
    *,
    coalesce: bool,
    clock: FileClock,
) -> list[Built | BaseException]:
    """``items`` and any late joiners (``more()``, until it has none) into the open
    transaction ``tx``, stamped in queue order above the file's clock, which then records
    the last stamp; extends ``items`` with the late joiners."""
    built: list[Built | BaseException] = []
    saved = 0
    clock.observe_floor(tx)
    while True:
        run = items[len(built) :]
        stamp(run, clock)  # before writing: seq order, then, is stamp order
        if len(run) == 1:
            op, n = append(tx, run[0], coalesce=coalesce)
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


def stamp(items: Sequence[NewOp], clock: FileClock) -> None:
    for new in items:
        new.clock = clock.next()


def append_run(
    tx: SQLiteTx, run: Sequence[NewOp], built: list[Built | BaseException], *, coalesce: bool
) -> int:
    """Several operations (a group commit's batch) in a few statements instead of two
    each: one query finds which of their entities have live operations, and the rest
    (new entities, each once in the run) go in with one multi-row INSERT as heads.
    Why it pays: every statement hands the interpreter lock to the threads preparing
    the next batch and must wait to get it back, so under contention the leader's
    statement count, not their work, sets the pace. An operation whose entity has a
    live operation, or appeared earlier in the run, goes through ``append()`` in its
    turn, after the rows before it are written, so seq still follows queue order and
    coalescing sees exactly what it would see one enqueue at a time. Appends to
    ``built``; returns how many sends coalescing saved."""
    names = json.dumps(list({new.entity: None for new in run}))
    busy = {r["entity"] for r in tx.fetchall("live_entities", {"entities": names})}
    seen: set[str] = set()
    heads: list[NewOp] = []
    saved = 0
    for new in run:
        if new.entity in busy or new.entity in seen:
            insert_heads(tx, heads, built)
            heads = []
            op, n = append(tx, new, coalesce=coalesce)
            built.append(op)
            saved += n
        else:
            heads.append(new)
        seen.add(new.entity)
    insert_heads(tx, heads, built)
    return saved


def insert_heads(tx: SQLiteTx, heads: Sequence[NewOp], built: list[Built | BaseException]) -> None:
    """Operations on entities with no live operation, in one statement."""
    if not heads:
        return
    sql = _INSERT_HEADS.get(len(heads))
    if sql is None:
        statement, _, row = tx.queries["insert_heads"].rpartition("\n")
        sql = _INSERT_HEADS[len(heads)] = statement + "\n" + ",\n".join([row] * len(heads))
    values: list[object] = []
    seal = tx.cipher.seal
    for new in heads:
        values += (
            new.id, new.idempotency_key, new.type, new.entity, new.endpoint, new.method,
            seal(new.payload, *PAYLOAD_AD, new.id), new.created_at, new.clock, new.created_at,
            new.base_version,
        )  # fmt: skip
    last = tx.conn.execute(sql, values).lastrowid
    assert last is not None
    # One statement, under the write lock: SQLite gives each row the greatest rowid so
    # far plus one, so the rows hold consecutive seqs ending at the last one.
    first = last - len(heads) + 1
    built.extend(
        functools.partial(from_new, new, first + i, OpStatus.PENDING) for i, new in enumerate(heads)
    )


def from_new(new: NewOp, seq: int, status: OpStatus, /) -> Operation:
    # Positional: a partial of it is called once per enqueue, and keywords would make it
    # merge a dict of them on every call.
    return Operation(
        id=new.id,
        type=new.type,
        entity=new.entity,
        payload=_decode(new.payload)[0],
        idempotency_key=new.idempotency_key,
        endpoint=new.endpoint,
        method=new.method,
        created_at=new.created_at,
        clock=new.clock,
        next_attempt_at=new.created_at,
        base_version=new.base_version,
        status=status,
        seq=seq,
    )
