"""The moves of an operation between states, each inside the caller's open write
transaction ``tx`` (`EdgeStore` opens it): dispatch, delivery, a failed attempt, release,
resurrection, removal. Each checks, in that transaction, that the operation is in a state
it may leave, and keeps the store's invariant: on each entity exactly the earliest queued
(live or dead) operation has ``head = 1``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.queue_store import Delivery, NextAttempt
from pigeon.edge.sqlite.rows import (
    operations,
    require,
    response_text,
    responses_json,
    responses_sealed,
    responses_values,
    to_operation,
    was_sent,
)
from pigeon.exceptions import InvalidState, NotFound
from pigeon.storage.sqlite import Row, SQLiteTx

HISTORY_LIMIT = 100  # failed attempts remembered per operation
# The statuses as stored (plain str), compared once per operation of a reply.
_IN_FLIGHT, _PENDING = OpStatus.IN_FLIGHT.value, OpStatus.PENDING.value
_DELIVERED = OpStatus.DELIVERED.value


def row(tx: SQLiteTx, path: str, op_id: str) -> Row:
    found = tx.fetchone("get_op", {"id": op_id})
    if found is None:
        raise NotFound(f"no operation {op_id!r} in {path}")
    return found


def dispatch(tx: SQLiteTx, n: int, now: float, owner: str | None) -> list[Operation]:
    """Up to ``n`` due heads marked in flight under ``owner``'s token, in queue order."""
    # Tuples: rows.operations() reads them by position.
    cursor = tx.tuples("dispatch_due", {"now": now, "n": n, "owner": owner})
    return sorted(operations(cursor, tx.cipher), key=lambda op: op.seq)


def deliver(tx: SQLiteTx, path: str, op_id: str, response: Any, now: float) -> None:
    text = response_text(response, op_id, tx.cipher)
    done = tx.fetchone("deliver", {"id": op_id, "now": now, "response": text})
    if done is None:  # not deliverable: say why (or nothing, if already delivered)
        found = row(tx, path, op_id)
        if found["status"] != OpStatus.DELIVERED:
            require(found, OpStatus.IN_FLIGHT, action="mark delivered")
        return
    if done["promote"] is not None:  # what promote_head would do, found by deliver
        tx.execute("set_head", {"seq": done["promote"]})


def deliver_many(tx: SQLiteTx, path: str, items: Sequence[Delivery], now: float) -> None:
    """``deliver`` for a whole reply: three statements (four with versions) however many
    operations, instead of two or three each. An entry not deliverable (and not already
    delivered) raises before anything is written. As one call per entry would: an id
    given twice counts once, with its first response and etag, and an etag becomes its
    entity's base version only if this call delivered the operation — a late repeat of
    an old reply must not put back a version the entity has left."""
    first: dict[str, tuple[Any, str | None]] = {}
    for op_id, response, etag in items:
        first.setdefault(op_id, (response, etag))
    ids = json.dumps(list(first))
    # (id, entity, status, dispatches) tuples: a dict per row cost more than its read.
    states = {r[0]: r for r in tx.tuples("delivery_states", {"ids": ids})}
    moved: list[str] = []
    entities: dict[str, None] = {}
    for op_id in first:
        found = states.get(op_id)
        if found is None:
            raise NotFound(f"no operation {op_id!r} in {path}")
        # What deliver_all's WHERE accepts: in flight, or pending once sent.
        _, entity, status, dispatches = found
        if status == _IN_FLIGHT or (status == _PENDING and dispatches):
            moved.append(op_id)
            entities[entity] = None
        elif status != _DELIVERED:
            require({"id": op_id, "status": status}, OpStatus.IN_FLIGHT, action="mark delivered")
    if not moved:  # all of it delivered before: a repeat changes nothing
        return
    answers = [(i, first[i][0]) for i in moved]
    if tx.cipher.enabled:  # sealed responses are bytes: a row each
        tx.executemany("deliver_sealed", responses_sealed(answers, now, tx.cipher))
    elif (values := responses_values(answers)) is not None:
        tx.execute("deliver_all_values", {"items": values, "now": now})
    else:  # a NaN is no JSON of SQLite's: the responses go as texts
        tx.execute("deliver_all", {"items": responses_json(answers), "now": now})
    versions: list[Mapping[str, Any]] = [
        {"entity": states[i][1], "version": first[i][1]} for i in moved if first[i][1] is not None
    ]
    if versions:
        tx.executemany("set_base_version", versions)
    tx.execute("promote_heads", {"entities": json.dumps(list(entities))})


def fail(
    tx: SQLiteTx, path: str, op_id: str, *, error: str, kind: str, now: float, then: NextAttempt
) -> Operation:
    found = row(tx, path, op_id)
    require(found, OpStatus.IN_FLIGHT, action="mark failed")
    attempts = found["attempts"] + 1
    history = json.loads(found["history"])
    history.append({"at": now, "attempt": attempts, "kind": kind, "error": error})
    goes = then(attempts, found["created_at"])
    params = {
        "seq": found["seq"],
        "attempts": attempts,
        "last_error": error,
        "history": json.dumps(history[-HISTORY_LIMIT:]),
        "next_attempt_at": now if isinstance(goes, OpStatus) else goes,
    }
    if goes is OpStatus.DEAD:
        tx.execute("bury", params)  # still the head: its entity's later operations wait
    elif goes is OpStatus.CONFLICT:
        tx.execute("hold_conflict", params)
    elif isinstance(goes, OpStatus):
        raise ValueError(f"a failed attempt goes to a time, DEAD or CONFLICT, not {goes}")
    else:
        tx.execute("reschedule", params)
    return to_operation(row(tx, path, op_id), tx.cipher)


def release(tx: SQLiteTx, path: str, op_id: str, *, due: float, sent: bool) -> Operation:
    found = row(tx, path, op_id)
    require(found, OpStatus.IN_FLIGHT, action="release")
    tx.execute("release", {"seq": found["seq"], "at": due, "unsent": int(not sent)})
    return to_operation(
        {**found, "status": OpStatus.PENDING.value, "next_attempt_at": due}
        | ({} if sent else {"dispatches": max(found["dispatches"] - 1, 0)}),
        tx.cipher,
    )


def resurrect(tx: SQLiteTx, path: str, op_id: str, now: float) -> Operation:
    found = row(tx, path, op_id)
    require(found, OpStatus.DEAD, action="retry")
    # In its own place: still its entity's head (or behind the head, in a file written
    # before dead letters kept theirs), ahead of what was made after it.
    tx.execute("resurrect", {"seq": found["seq"], "now": now})
    return to_operation(row(tx, path, op_id), tx.cipher)


def remove(
    tx: SQLiteTx,
    path: str,
    op_id: str,
    *,
    allowed: Sequence[OpStatus],
    action: str,
    tail: bool = False,
) -> list[Operation]:
    """Delete the operation; with ``tail``, also the operations waiting behind it (it
    must then be its entity's head), up to the first that was ever sent: the server may
    hold that one, so it stays and goes. Returns the tail operations deleted."""
    found = row(tx, path, op_id)
    require(found, *allowed, action=action)
    if found["status"] == OpStatus.PENDING and was_sent(found):
        raise InvalidState(
            f"cannot {action} operation {op_id}: it was already sent "
            f"({found['attempts']} failed attempts); the server may have it"
        )
    dropped: list[Operation] = []
    if tail:
        for waiting in tx.fetchall("tail_behind", {"seq": found["seq"]}):
            if was_sent(waiting):
                break
            dropped.append(to_operation(waiting, tx.cipher))
            tx.execute("delete_op", {"seq": waiting["seq"]})
    tx.execute("delete_op", {"seq": found["seq"]})
    tx.execute("promote_head", {"entity": found["entity"]})
    return dropped


def unhold(tx: SQLiteTx, path: str, op_id: str, now: float) -> None:
    found = row(tx, path, op_id)
    require(found, OpStatus.CONFLICT, action="resolve the conflict of")
    tx.execute("unhold_conflict", {"seq": found["seq"], "now": now})
