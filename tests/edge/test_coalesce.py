"""Coalescing rules, and the law: the coalesced queue leaves a server as the raw one would."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.edge.coalesce import Decision, Fold, Step, coalesce, decide

C, U, D = "create", "update", "delete"


def test_create_then_update_is_a_create_with_the_latest_data() -> None:
    last = Step(C, "note:1", {"v": 1}, "/notes", "POST")
    decision = decide(last, Step(U, "note:1", {"v": 2}, "/notes/1", "PUT"))
    assert decision == Decision(Fold.REPLACE, Step(C, "note:1", {"v": 2}, "/notes", "POST"))


def test_update_then_update_keeps_the_latest() -> None:
    last = Step(U, "note:1", {"v": 1}, "/notes/1", "PUT")
    decision = decide(last, Step(U, "note:1", {"v": 2}, "/notes/1", "PUT"))
    assert decision.fold is Fold.REPLACE and decision.step is not None
    assert decision.step.payload == {"v": 2}


def test_create_then_delete_is_nothing_and_update_then_delete_is_delete() -> None:
    assert decide(Step(C, "n"), Step(D, "n")).fold is Fold.DROP
    decision = decide(Step(U, "n", 1), Step(D, "n", None, "/ns/n", "DELETE"))
    assert decision == Decision(Fold.REPLACE, Step(D, "n", None, "/ns/n", "DELETE"))


def test_never_folds_into_something_sent_or_unknown_or_after_a_delete() -> None:
    assert decide(Step(C, "n", sent=True), Step(U, "n")).fold is Fold.APPEND
    assert decide(Step(U, "n", sent=True), Step(D, "n")).fold is Fold.APPEND
    assert decide(Step(D, "n"), Step(C, "n")).fold is Fold.APPEND
    assert decide(Step(C, "n"), Step(C, "n")).fold is Fold.APPEND
    assert decide(Step("publish", "n"), Step(U, "n")).fold is Fold.APPEND
    assert decide(Step(U, "n"), Step("publish", "n")).fold is Fold.APPEND
    assert decide(None, Step(U, "n")).fold is Fold.APPEND


# -- the law, against a model server ------------------------------------------------------


def apply(server: dict[str, Any], steps: list[Step]) -> dict[str, Any]:
    """A strict REST server: create needs absence, update and delete need presence;
    anything else is refused and changes nothing."""
    state = dict(server)
    for step in steps:
        exists = step.entity in state
        if (step.type == C and not exists) or (step.type == U and exists):
            state[step.entity] = step.payload
        elif step.type == D and exists:
            del state[step.entity]
    return state


@st.composite
def client_sessions(draw: st.DrawFn) -> tuple[dict[str, Any], list[Step]]:
    """What an app editing local data produces: creates only what does not exist, edits
    and deletes what does; sometimes the sender takes an operation before the next one."""
    entities = [f"note:{i}" for i in range(draw(st.integers(1, 4)))]
    server = {e: -1 for e in entities if draw(st.booleans())}
    local = set(server)
    steps: list[Step] = []
    for n in range(draw(st.integers(0, 40))):
        entity = draw(st.sampled_from(entities))
        kind = draw(st.sampled_from([U, U, D]) if entity in local else st.just(C))
        if kind == D:
            local.discard(entity)
        else:
            local.add(entity)
        steps.append(Step(kind, entity, None if kind == D else n, sent=draw(st.booleans())))
    return server, steps


@settings(max_examples=500)
@given(client_sessions())
def test_coalesced_queue_leaves_the_server_as_the_raw_queue(
    session: tuple[dict[str, Any], list[Step]],
) -> None:
    server, raw = session
    folded = coalesce(raw)
    assert apply(server, folded) == apply(server, raw)
    assert len(folded) <= len(raw)
    # order per entity is never changed, only shortened
    for entity in {s.entity for s in raw}:
        kept = [s.payload for s in folded if s.entity == entity and s.type != D]
        assert kept == sorted(kept, key=lambda p: -1 if p is None else p)


def test_an_offline_editing_session_shrinks() -> None:
    raw = [Step(C, "note:1", 0)] + [Step(U, "note:1", i) for i in range(1, 20)]
    raw += [Step(C, "note:2", 0), Step(U, "note:2", 1), Step(D, "note:2")]
    assert coalesce(raw) == [Step(C, "note:1", 19)]
