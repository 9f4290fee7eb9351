"""Coalescing: fold a new operation into its entity's pending, never-sent tail. Pure.

The rules (DESIGN.md, "Coalescing"), where ``last`` is the entity's latest undelivered
operation and may be folded into only if it has never been handed to a sender:

=================  =========================================
last + incoming    result
=================  =========================================
CREATE + UPDATE    CREATE carrying the update's payload
UPDATE + UPDATE    UPDATE carrying the latest payload
CREATE + DELETE    nothing at all (both vanish)
UPDATE + DELETE    DELETE (the update's base version kept)
anything else      appended as it is
=================  =========================================

The law: sending the coalesced queue leaves the server in the same state as sending the raw
one. It holds under two assumptions, both stated here because the rules depend on them:

* an ``update`` carries the entity's full new state (PUT semantics, not a patch) — an app
  with partial updates should give them its own type name, and app-defined types are
  never folded;
* the queue records a consistent local history: a ``create`` is for an entity that does
  not exist yet (client-made ids), updates and deletes for one that does.

Never folding into an operation that may be in flight is what makes this safe with
idempotency keys: the server may already hold the older payload under the older key.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from pigeon.edge.operation import OpType

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
class Decision:
    fold: Fold
    step: Step | None = None  # REPLACE: what `last` becomes


def decide(last: Step | None, incoming: Step) -> Decision:
    """How ``incoming`` joins a queue whose latest live operation on its entity is ``last``."""
    if last is None or last.sent or last.entity != incoming.entity:
        return Decision(Fold.APPEND)
    pair = (last.type, incoming.type)
    if pair == (_CREATE, _UPDATE):
        return Decision(Fold.REPLACE, replace(last, payload=incoming.payload))
    if pair == (_UPDATE, _UPDATE):
        return Decision(
            Fold.REPLACE,
            replace(
                last,
                payload=incoming.payload,
                endpoint=incoming.endpoint,
                method=incoming.method,
            ),
        )
    if pair == (_CREATE, _DELETE):
        return Decision(Fold.DROP)
    if pair == (_UPDATE, _DELETE):
        return Decision(Fold.REPLACE, incoming)
    return Decision(Fold.APPEND)


def coalesce(steps: Iterable[Step]) -> list[Step]:
    """Apply the rules to a whole sequence, as the queue does one enqueue at a time."""
    queue: list[Step] = []
    for step in steps:
        index = next(
            (i for i in range(len(queue) - 1, -1, -1) if queue[i].entity == step.entity), None
        )
        last = None if index is None else queue[index]
        decision = decide(last, step)
        if decision.fold is Fold.APPEND:
            queue.append(step)
        elif decision.fold is Fold.REPLACE:
            assert index is not None and decision.step is not None
            queue[index] = replace(decision.step, sent=step.sent)
        else:
            assert index is not None
            del queue[index]
    return queue
