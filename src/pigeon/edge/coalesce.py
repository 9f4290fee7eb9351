"""Coalescing: fold a new operation into its entity's pending, never-sent tail. Pure.

The rules (docs/design.md, "Coalescing"), where ``last`` is the entity's latest undelivered
operation and may be folded into only if it has never been handed to a sender:

=================  ===========================================================
last + incoming    result
=================  ===========================================================
CREATE + UPDATE    CREATE carrying the update's payload
UPDATE + UPDATE    UPDATE carrying the latest payload
CREATE + DELETE    nothing at all (both vanish)
UPDATE + DELETE    DELETE (the update's base version kept)
anything else      appended as it is
=================  ===========================================================

and each fold only when the two requests write the same resource and the later one
makes the earlier one's effect irrelevant:

* an UPDATE folds only if it replaces the whole resource (method PUT, or none given:
  ``route()`` sends an update with PUT) — a PATCH only changes some fields, so the earlier
  write still matters; an UPDATE folds into an UPDATE only with the same endpoint and the
  same method;
* a DELETE folds only if it is sent with DELETE (or the default method);
* "the same resource" follows ``route()``'s conventions: POST to a collection creates
  ``<collection>/<id>`` (client-made ids, the id from ``kind:id``), any other method writes
  its endpoint. An update sent elsewhere (``/archive/42``) writes another resource.

The law: sending the coalesced queue leaves the server in the same state as sending the raw
one. Besides the checks above it rests on one assumption: the queue records a consistent
local history — a ``create`` is for a resource that does not exist yet, updates and
deletes for one that does. App-defined types are never folded.

Never folding into an operation that may be in flight is what makes this safe with
idempotency keys: the server may already hold the older payload under the older key.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from pigeon.core.identifiers import path_segment
from pigeon.core.operation import OpType
from pigeon.edge.validate import DEFAULT_METHODS

_CREATE, _UPDATE, _DELETE = OpType.CREATE.value, OpType.UPDATE.value, OpType.DELETE.value


class Fold(enum.Enum):
    APPEND = "append"  # store the incoming operation as a new one
    REPLACE = "replace"  # rewrite `last` in place (same id, same key, same position)
    DROP = "drop"  # delete `last`; the incoming operation is not stored either


@dataclass(frozen=True, slots=True)
class Step:
    """What coalescing needs to know of one operation."""

    type: str
    entity: str
    payload: Any = None
    endpoint: str | None = None
    method: str | None = None
    sent: bool = False  # handed to a sender at least once: never fold into it


@dataclass(frozen=True, slots=True)
class FoldVerdict:
    """How an incoming step folds into the entity's last pending one."""

    fold: Fold
    step: Step | None = None  # REPLACE: what `last` becomes


def fold_into(last: Step | None, incoming: Step) -> FoldVerdict:
    """How ``incoming`` folds into ``last``, the latest live operation on its entity."""
    if last is None or last.sent or last.entity != incoming.entity:
        return FoldVerdict(Fold.APPEND)
    pair = (last.type, incoming.type)
    same = _same_resource(last, incoming)
    if pair == (_CREATE, _UPDATE) and _creates(last) and _replaces(incoming) and same:
        return FoldVerdict(Fold.REPLACE, replace(last, payload=incoming.payload))
    if pair == (_UPDATE, _UPDATE) and _replaces(incoming) and _route(last) == _route(incoming):
        return FoldVerdict(Fold.REPLACE, replace(last, payload=incoming.payload))
    if pair == (_CREATE, _DELETE) and _creates(last) and _deletes(incoming) and same:
        return FoldVerdict(Fold.DROP)
    # UPDATE + DELETE: the update only wrote the resource the delete removes.
    if pair == (_UPDATE, _DELETE) and _method(last) in _WRITES and _deletes(incoming) and same:
        return FoldVerdict(Fold.REPLACE, incoming)
    return FoldVerdict(Fold.APPEND)


_WRITES = ("PUT", "PATCH")  # methods that write their endpoint and nothing else


def _method(step: Step) -> str | None:
    """The method ``step`` is sent with: its own, else its type's default (as ``route()``
    gives it); upper case, as ``route()`` stores it."""
    if step.method is not None:
        return step.method.upper()
    return DEFAULT_METHODS.get(step.type)


def _route(step: Step) -> tuple[str | None, str | None]:
    return step.endpoint, _method(step)


def _replaces(update: Step) -> bool:
    """A full replacement of its resource: whatever was written to it before is gone."""
    return _method(update) == "PUT"


def _deletes(delete: Step) -> bool:
    return _method(delete) == "DELETE"


def _creates(create: Step) -> bool:
    """A create whose resource we can name (POST to its collection, or PUT to itself)."""
    return _method(create) in ("POST", "PUT")


def _resource(step: Step) -> str | None:
    """The resource ``step`` writes (None: no endpoint, the operation goes nowhere)."""
    if step.endpoint is None:
        return None
    if _method(step) != "POST":
        return step.endpoint
    _, sep, ident = step.entity.partition(":")
    if not sep or not ident:
        return None  # no client-made id to name what the POST creates
    return f"{step.endpoint.rstrip('/')}/{path_segment(ident)}"


def _same_resource(a: Step, b: Step) -> bool:
    ra, rb = _resource(a), _resource(b)
    if ra is None or rb is None:
        # Neither has an endpoint (nothing is sent, so nothing on the server can differ):
        # fold by entity. One with and one without: they are not the same request target.
        return a.endpoint is None and b.endpoint is None
    return ra == rb


def coalesce(steps: Iterable[Step]) -> list[Step]:
    """Apply the rules to a whole sequence, as the queue does one enqueue at a time."""
    queue: list[Step] = []
    for step in steps:
        index = next(
            (i for i in range(len(queue) - 1, -1, -1) if queue[i].entity == step.entity), None
        )
        last = None if index is None else queue[index]
        verdict = fold_into(last, step)
        if verdict.fold is Fold.APPEND:
            queue.append(step)
        elif verdict.fold is Fold.REPLACE:
            assert index is not None and verdict.step is not None
            queue[index] = replace(verdict.step, sent=step.sent)
        else:
            assert index is not None
            del queue[index]
    return queue
