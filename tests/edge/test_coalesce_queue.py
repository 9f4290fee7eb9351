"""The coalescing law through the real queue: interleave edits with deliveries (so some
tails are in flight and must not be folded into) and compare the server's final state."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue

C, U, D = "create", "update", "delete"


def apply(state: dict[str, Any], type_: str, entity: str, payload: Any) -> None:
    exists = entity in state
    if (type_ == C and not exists) or (type_ == U and exists):
        state[entity] = payload
    elif type_ == D and exists:
        del state[entity]


@st.composite
def sessions(draw: st.DrawFn) -> list[tuple[str, str, int]]:
    entities = [f"note:{i}" for i in range(draw(st.integers(1, 3)))]
    local: set[str] = set()
    actions: list[tuple[str, str, int]] = []
    for n in range(draw(st.integers(1, 30))):
        if draw(st.integers(0, 4)) == 0:
            actions.append(("send", "", draw(st.integers(1, 3))))
            continue
        entity = draw(st.sampled_from(entities))
        kind = draw(st.sampled_from([U, U, D])) if entity in local else C
        (local.discard if kind == D else local.add)(entity)
        actions.append((kind, entity, n))
    return actions


def deliver(queue: OfflineQueue, server: dict[str, Any], n: int) -> int:
    sent = 0
    for op in queue.next_batch(n):
        apply(server, op.type, op.entity, op.payload)
        queue.mark_delivered(op.id)
        sent += 1
    return sent


@settings(max_examples=60, deadline=None)
@given(sessions())
def test_queue_delivers_the_same_server_state_as_the_raw_edits(
    actions: list[tuple[str, str, int]],
) -> None:
    raw_server: dict[str, Any] = {}
    server: dict[str, Any] = {}
    edits = 0
    with (
        tempfile.TemporaryDirectory() as tmp,
        OfflineQueue(Path(tmp) / "q.db", QueueOptions(durability="normal")) as queue,
    ):
        for kind, entity, n in actions:
            if kind == "send":
                deliver(queue, server, n)
                continue
            edits += 1
            apply(raw_server, kind, entity, None if kind == D else n)
            queue.enqueue(kind, entity, None if kind == D else n)
        while deliver(queue, server, 100):
            pass
        sends = len(queue.operations("delivered"))
        assert queue.stats().coalesced == edits - sends  # every saved send is counted
        assert queue.stats().depth == 0
    assert server == raw_server
    assert sends <= edits
