"""Three-way merges and the resolver's decision: pure properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.core.operation import Operation
from pigeon.edge.conflicts import DELETED, local_state
from pigeon.edge.merge import SEPARATOR, field_merge, notes_merge
from pigeon.exceptions import ConfigurationError, InvalidOperation
from pigeon.sync.resolver import ConflictPolicy, Resolution, Strategy, resolution_for

names = st.sampled_from(["title", "body", "tags", "done", "colour"])
values = st.one_of(st.integers(0, 3), st.text("ab", max_size=2), st.booleans())
objects = st.dictionaries(names, values, max_size=5)


@st.composite
def divergent(draw: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], set[str]]:
    """A base and two edits of it that touch disjoint sets of fields."""
    base = draw(objects)
    fields = sorted(draw(st.sets(names, max_size=5)))
    mine = set(draw(st.sets(st.sampled_from(fields), max_size=len(fields)))) if fields else set()
    local, remote = dict(base), dict(base)
    for name in fields:
        side = local if name in mine else remote
        if draw(st.booleans()) and name in side:
            del side[name]
        else:
            side[name] = draw(values)
    return base, local, remote, mine


@given(divergent(), st.sampled_from(["local", "remote"]))
def test_field_merge_loses_no_non_overlapping_edit(case: Any, tie: str) -> None:
    base, local, remote, mine = case
    merged = field_merge(base, local, remote, tie)  # type: ignore[arg-type]
    for name in {*base, *local, *remote}:
        source = local if name in mine else remote
        if source.get(name, "<gone>") != base.get(name, "<gone>"):
            assert merged.get(name, "<gone>") == source.get(name, "<gone>"), name
        elif local.get(name, "<gone>") == remote.get(name, "<gone>"):
            assert merged.get(name, "<gone>") == local.get(name, "<gone>")


@given(objects, objects, objects)
def test_a_clash_goes_to_the_tie_break(base: Any, local: Any, remote: Any) -> None:
    to_local = field_merge(base, local, remote, "local")
    to_remote = field_merge(base, local, remote, "remote")
    for name in {*local, *remote}:
        mine, theirs = local.get(name), remote.get(name)
        changed_both = mine != base.get(name) and theirs != base.get(name) and mine != theirs
        if changed_both:
            assert to_local.get(name) == mine and to_remote.get(name) == theirs


def test_nested_objects_merge_field_by_field() -> None:
    base = {"meta": {"a": 1, "b": 1}}
    merged = field_merge(base, {"meta": {"a": 2, "b": 1}}, {"meta": {"a": 1, "b": 3}})
    assert merged == {"meta": {"a": 2, "b": 3}}


def test_the_notes_merge_keeps_both_texts_with_a_visible_separator() -> None:
    base = {"title": "Shopping", "body": "milk"}
    local = {"title": "Shopping", "body": "milk, eggs"}
    remote = {"title": "Groceries", "body": "milk, bread"}
    merged = notes_merge(base, local, remote)
    assert merged == {"title": "Groceries", "body": f"milk, eggs{SEPARATOR}milk, bread"}


def test_bad_merge_input_is_refused() -> None:
    with pytest.raises(InvalidOperation, match="JSON objects"):
        field_merge({}, [1], {})  # type: ignore[arg-type]
    with pytest.raises(InvalidOperation, match="tie"):
        field_merge({}, {}, {}, "mine")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="merge"):
        ConflictPolicy(Strategy.CUSTOM)


def op(type_: str, payload: Any, method: str | None = None) -> Operation:
    return Operation(
        id="x", type=type_, entity="note:1", payload=payload, idempotency_key="k", method=method
    )


def test_local_state_folds_the_live_tail() -> None:
    ops = [op("update", {"a": 1, "b": 1}, "PUT"), op("patch", {"b": None, "c": 2}, "PATCH")]
    assert local_state(ops, {"z": 0}) == {"a": 1, "c": 2}
    assert local_state([*ops, op("delete", {}, "DELETE")], None) is DELETED
    assert local_state([op("delete", {}, "DELETE"), op("create", {"a": 9}, "POST")], {}) == {"a": 9}


policies = st.sampled_from(
    [
        ConflictPolicy(Strategy.FIELD_MERGE),
        ConflictPolicy(Strategy.FIELD_MERGE, tie="local"),
        ConflictPolicy(Strategy.CUSTOM, merge=notes_merge),
        ConflictPolicy(Strategy.USER),
        ConflictPolicy(Strategy.LWW),
        ConflictPolicy(Strategy.CRDT),
    ]
)


@given(policies, objects, st.one_of(objects, st.just(DELETED)), st.one_of(objects, st.none()))
def test_every_conflict_ends_in_exactly_one_outcome(
    policy: ConflictPolicy, base: Any, local: Any, remote: Any
) -> None:
    decision = resolution_for(policy, base, local, remote)
    assert isinstance(decision, Resolution)
    assert decision.kind in ("merged", "won", "lost", "held")
    if decision.kind == "held":
        assert policy.strategy in (Strategy.USER, Strategy.LWW, Strategy.CRDT) or remote is None
    elif decision.kind == "lost":
        assert decision.value == remote  # nothing sent: the server's value stands
    elif decision.kind == "won":
        assert decision.value is DELETED or decision.value == local
    else:
        assert decision.value not in (local, remote)
