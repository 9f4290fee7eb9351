"""Rows of the operations table as ``Operation``s, and the row-level checks on them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from pigeon.core.jsontext import one_encoder
from pigeon.core.operation import Operation, OpStatus
from pigeon.exceptions import InvalidState
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.sqlite import Row

_raw_decode = json.JSONDecoder().raw_decode
# A status as stored -> the OpStatus: a dict lookup, not OpStatus(text), per row handed out.
_STATUSES = {status.value: status for status in OpStatus}
# The fields Operation is built from, positionally, in their order (rows.operations).
OPERATION_FIELDS = (
    "id", "type", "entity", "payload", "idempotency_key", "endpoint", "method", "created_at",
    "clock", "attempts", "next_attempt_at", "last_error", "base_version", "status", "seq",
    "history", "delivered_at", "response",
)  # fmt: skip
_EMPTY_HISTORY = "[]"  # what almost every row holds: no json.loads for it
# With a keyring, an operation's payload and the server's response to it are sealed, each
# bound to the operation's id, as BLOBs (`pigeon.storage.crypto`, `Cipher.seal_binary`).
PAYLOAD_AD = ("operations", "payload")
RESPONSE_AD = ("operations", "response")


def to_operation(row: Row, cipher: Cipher = PLAIN) -> Operation:
    op_id = row["id"]
    response = cipher.open(row["response"], *RESPONSE_AD, op_id)
    return Operation(
        id=op_id,
        type=row["type"],
        entity=row["entity"],
        payload=json.loads(cipher.open(row["payload"], *PAYLOAD_AD, op_id)),
        idempotency_key=row["idempotency_key"],
        endpoint=row["endpoint"],
        method=row["method"],
        created_at=row["created_at"],
        clock=row["clock"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        base_version=row["base_version"],
        status=OpStatus(row["status"]),
        seq=row["seq"],
        history=[] if row["history"] == _EMPTY_HISTORY else json.loads(row["history"]),
        delivered_at=row["delivered_at"],
        response=None if response is None else json.loads(response),
        held=bool(row.get("held")),  # only the listings' queries compute it
    )


def operations(cursor: sqlite3.Cursor, cipher: Cipher = PLAIN) -> list[Operation]:
    """Every row of ``cursor`` (``SELECT *`` or ``RETURNING *`` on operations, its row
    factory unset so rows are tuples) as an Operation: ``to_operation`` without building
    a dict per row first, for the hundred rows a ``next_batch`` hands out."""
    rows: list[Sequence[Any]] = cursor.fetchall()
    if not rows:
        return []
    where = {col[0]: i for i, col in enumerate(cursor.description)}
    at = tuple(where[name] for name in OPERATION_FIELDS)
    i_id, i_payload, i_response = at[0], at[3], at[17]
    if cipher.enabled:  # opened in place: the loop below stays as fast without a key
        rows = [_opened(r, cipher, i_id, i_payload, i_response) for r in rows]
    try:
        return _built(rows, at)
    except (ValueError, TypeError):
        if not cipher.enabled:  # a sealed file read without its key: name the key
            for r in rows:
                cipher.open(r[i_payload], *PAYLOAD_AD, r[i_id])
                cipher.open(r[i_response], *RESPONSE_AD, r[i_id])
        raise


def _built(rows: list[Sequence[Any]], at: tuple[int, ...]) -> list[Operation]:
    """The Operations of ``rows``, read at ``at`` (OPERATION_FIELDS' columns by position)."""
    (i_id, i_type, i_entity, i_payload, i_key, i_endpoint, i_method, i_created, i_clock,
     i_attempts, i_next, i_error, i_base, i_status, i_seq, i_history, i_delivered,
     i_response) = at  # fmt: skip
    # Positional, in the order of Operation's fields (OPERATION_FIELDS, which a test
    # holds to it): keywords cost twice as much for eighteen of them.
    loads, status = json.loads, _STATUSES.__getitem__
    return [
        Operation(
            r[i_id],
            r[i_type],
            r[i_entity],
            _payload(r[i_payload]),
            r[i_key],
            r[i_endpoint],
            r[i_method],
            r[i_created],
            r[i_clock],
            r[i_attempts],
            r[i_next],
            r[i_error],
            r[i_base],
            status(r[i_status]),
            r[i_seq],
            [] if r[i_history] == _EMPTY_HISTORY else loads(r[i_history]),
            r[i_delivered],
            None if r[i_response] is None else loads(r[i_response]),
        )
        for r in rows
    ]


def _payload(text: str) -> Any:
    """A stored payload: validate.encode_payload's text, one JSON value with nothing around
    it, which raw_decode reads as json.loads would, without loads' two whitespace regexes;
    any other text (an import's, say) goes to json.loads and its checks."""
    try:
        value, end = _raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _opened(
    row: Sequence[Any], cipher: Cipher, i_id: int, i_payload: int, i_response: int
) -> list[Any]:
    """The row with its sealed columns opened: a list, which indexes as the tuple did."""
    values = list(row)
    values[i_payload] = cipher.open(row[i_payload], *PAYLOAD_AD, row[i_id])
    if row[i_response] is not None:  # none yet on the rows next_batch hands out
        values[i_response] = cipher.open(row[i_response], *RESPONSE_AD, row[i_id])
    return values


def was_sent(row: Row) -> bool:
    """Handed to a sender at some point: the server may hold it, so it is never rewritten."""
    return bool(row["status"] != OpStatus.PENDING or row["attempts"] or row["dispatches"])


def require(row: Row, *allowed: OpStatus, action: str) -> None:
    if row["status"] not in allowed:
        wanted = " or ".join(s.value for s in allowed)
        raise InvalidState(
            f"cannot {action} operation {row['id']}: it is {row['status']}, not {wanted}"
        )


def response_text(response: Any, op_id: str, cipher: Cipher = PLAIN) -> str | bytes | None:
    """A response as its column stores it: its JSON text, sealed with a key."""
    if response is None:
        return None
    return cipher.seal_binary(response_json(response), *RESPONSE_AD, op_id)


def responses_json(items: Sequence[tuple[str, Any]]) -> str:
    """The ``:items`` of deliver_all: a JSON list of ``[id, stored response text]``."""
    return json.dumps([[op_id, response_text(response, op_id)] for op_id, response in items])


def responses_sealed(
    items: Sequence[tuple[str, Any]], now: float, cipher: Cipher
) -> list[tuple[float, str | bytes | None, str]]:
    """The rows of deliver_sealed, one per ``(id, response)``: sealed values are bytes,
    which no JSON list carries."""
    return [(now, response_text(response, op_id, cipher), op_id) for op_id, response in items]


# Responses as JSON values in deliver_all_values' list (NaN and infinities refused: no
# JSON SQLite reads), anything else JSON has no type for as its text, as response_json.
_COMPACT = (",", ":")
_VALUES = one_encoder(json.JSONEncoder(allow_nan=False, default=str, separators=_COMPACT))
_RESPONSE = one_encoder(json.JSONEncoder(default=str, separators=_COMPACT))


def responses_values(items: Sequence[tuple[str, Any]]) -> str | None:
    """The ``:items`` of deliver_all_values: a JSON list of ``[id, response]``, each
    response the JSON value itself, which the statement stores as its text. One pass of
    the C encoder: deliver_all's list of texts encoded each response, then escaped every
    quote of it again (a sixth of the sync engine's CPU in a drain). None when a response
    holds a number JSON has not (NaN, an infinity): deliver_all takes that one."""
    try:
        return _VALUES([[op_id, response] for op_id, response in items])
    except ValueError:
        return None


def response_json(value: Any) -> str:
    """``json.dumps(value, default=str, separators=(",", ":"))``, the same text, from one C
    encoder (`pigeon.core.jsontext`): for every operation delivered, dumps' Python layers
    (a new JSONEncoder, encode, iterencode) cost more than encoding a reply's body (2.5 us
    instead of 6). Compact, as SQLite writes the same value (deliver_all_values): one
    delivery and a reply's run store the same text."""
    return _RESPONSE(value)
