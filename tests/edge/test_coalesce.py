"""Coalescing rules, and the law: the coalesced queue leaves a server as the raw one would."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.edge.coalesce import Fold, FoldVerdict, Step, coalesce, fold_into
from pigeon.edge.merge import merge_patch
from pigeon.edge.validate import route

C, U, D = "create", "update", "delete"


def test_create_then_update_is_a_create_with_the_latest_data() -> None:
    last = Step(C, "note:1", {"v": 1}, "/notes", "POST")
    verdict = fold_into(last, Step(U, "note:1", {"v": 2}, "/notes/1", "PUT"))
    assert verdict == FoldVerdict(Fold.REPLACE, Step(C, "note:1", {"v": 2}, "/notes", "POST"))


def test_update_then_update_keeps_the_latest() -> None:
    last = Step(U, "note:1", {"v": 1}, "/notes/1", "PUT")
    verdict = fold_into(last, Step(U, "note:1", {"v": 2}, "/notes/1", "PUT"))
    assert verdict.fold is Fold.REPLACE and verdict.step is not None
    assert verdict.step.payload == {"v": 2}


def test_create_then_delete_is_nothing_and_update_then_delete_is_delete() -> None:
    assert fold_into(Step(C, "n"), Step(D, "n")).fold is Fold.DROP
    verdict = fold_into(Step(U, "n", 1, "/ns/n", "PUT"), Step(D, "n", None, "/ns/n", "DELETE"))
    assert verdict == FoldVerdict(Fold.REPLACE, Step(D, "n", None, "/ns/n", "DELETE"))


def test_never_folds_into_something_sent_or_unknown_or_after_a_delete() -> None:
    assert fold_into(Step(C, "n", sent=True), Step(U, "n")).fold is Fold.APPEND
    assert fold_into(Step(U, "n", sent=True), Step(D, "n")).fold is Fold.APPEND
    assert fold_into(Step(D, "n"), Step(C, "n")).fold is Fold.APPEND
    assert fold_into(Step(C, "n"), Step(C, "n")).fold is Fold.APPEND
    assert fold_into(Step("publish", "n"), Step(U, "n")).fold is Fold.APPEND
    assert fold_into(Step(U, "n"), Step("publish", "n")).fold is Fold.APPEND
    assert fold_into(None, Step(U, "n")).fold is Fold.APPEND


def test_a_patch_is_never_folded_it_changes_only_some_fields() -> None:
    patch = Step(U, "note:1", {"body": "B"}, "/notes/1", "PATCH")
    assert (
        fold_into(Step(U, "note:1", {"title": "T"}, "/notes/1", "PATCH"), patch).fold is Fold.APPEND
    )
    assert (
        fold_into(Step(U, "note:1", {"title": "T"}, "/notes/1", "PUT"), patch).fold is Fold.APPEND
    )
    assert fold_into(Step(C, "note:1", {"id": "1"}, "/notes", "POST"), patch).fold is Fold.APPEND


def test_an_update_folds_only_into_a_write_of_the_same_resource_the_same_way() -> None:
    put = Step(U, "note:1", {"v": 2}, "/archive/1", "PUT")
    assert fold_into(Step(U, "note:1", {"v": 1}, "/notes/1", "PUT"), put).fold is Fold.APPEND
    assert fold_into(Step(C, "note:1", {"v": 1}, "/notes", "POST"), put).fold is Fold.APPEND
    post = Step(U, "note:1", {"v": 2}, "/notes/1", "POST")
    assert fold_into(Step(U, "note:1", {"v": 1}, "/notes/1", "POST"), post).fold is Fold.APPEND
    # a create at a collection of its own, and the update of what it made: folded
    create = Step(C, "card:g", {"id": "g"}, "/notes", "POST")
    verdict = fold_into(create, Step(U, "card:g", {"v": 2}, "/notes/g", "PUT"))
    assert verdict == FoldVerdict(Fold.REPLACE, replace(create, payload={"v": 2}))


def test_a_delete_folds_only_when_it_deletes_what_the_tail_wrote() -> None:
    create = Step(C, "note:1", {"id": "1"}, "/notes", "POST")
    assert fold_into(create, Step(U, "note:1", {}, "/notes/1", "DELETE")).fold is Fold.APPEND
    assert fold_into(create, Step(D, "note:1", None, "/archive/1", "DELETE")).fold is Fold.APPEND
    assert fold_into(create, Step(D, "note:1", None, "/notes/1", "POST")).fold is Fold.APPEND
    update = Step(U, "note:1", {"v": 1}, "/notes/1", "PUT")
    assert fold_into(update, Step(D, "note:1", None, "/archive/1", "DELETE")).fold is Fold.APPEND
    assert fold_into(create, Step(D, "note:1", None, "/notes/1", "DELETE")).fold is Fold.DROP


# -- the law, against a model server ------------------------------------------------------


def apply(server: dict[str, Any], steps: list[Step]) -> dict[str, Any]:
    """A strict REST server that knows only what goes over the wire: method, endpoint and
    body. POST to a collection creates ``<collection>/<id>`` and needs it absent; PUT
    replaces, PATCH merges (RFC 7396), DELETE removes — each needs the resource present.
    Anything else is refused and changes nothing."""
    state = dict(server)
    for step in steps:
        endpoint, method = route(step.type, step.entity, step.endpoint, step.method)
        assert endpoint is not None and method is not None
        if method == "POST":
            endpoint = f"{endpoint}/{step.entity.partition(':')[2]}"
        exists = endpoint in state
        if (method == "POST" and not exists) or (method == "PUT" and exists):
            state[endpoint] = step.payload
        elif method == "PATCH" and exists:
            state[endpoint] = merge_patch(state[endpoint], step.payload)
        elif method == "DELETE" and exists:
            del state[endpoint]
    return state


# Two homes for a note: the default routes (/notes, /notes/<id>) and another API.
_HOMES = ("/notes", "/v2/notes")


@st.composite
def client_sessions(draw: st.DrawFn) -> tuple[dict[str, Any], list[Step]]:
    """What an app editing local data produces: creates only what does not exist, edits
    and deletes what does — through the default routes or another endpoint, with PUT,
    PATCH or DELETE; sometimes the sender takes an operation before the next one."""
    entities = [f"note:{i}" for i in range(draw(st.integers(1, 3)))]
    resources = [(home, e) for home in _HOMES for e in entities]
    server = {f"{h}/{e[5:]}": {"n": -1, "a": -1} for h, e in resources if draw(st.booleans())}
    local = set(server)
    steps: list[Step] = []
    for n in range(draw(st.integers(0, 40))):
        home, entity = draw(st.sampled_from(resources))
        path = f"{home}/{entity[5:]}"
        default = home == _HOMES[0] and draw(st.booleans())  # endpoint left to route()
        if path not in local:
            local.add(path)
            step = Step(C, entity, {"n": n}, None if default else home)
        else:
            kind, method = draw(
                st.sampled_from([(U, None), (U, "PUT"), (U, "PATCH"), (U, "DELETE"), (D, None)])
            )
            if kind == D or method == "DELETE":
                local.discard(path)
            payload = {"n": n, draw(st.sampled_from("ab")): n} if kind == U else None
            step = Step(kind, entity, payload, None if default else path, method)
        steps.append(replace(step, sent=draw(st.booleans())))
    return server, steps


@settings(max_examples=1000)
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
        kept = [s.payload["n"] for s in folded if s.entity == entity and s.type != D]
        assert kept == sorted(kept)


def test_an_offline_editing_session_shrinks() -> None:
    raw = [Step(C, "note:1", 0)] + [Step(U, "note:1", i) for i in range(1, 20)]
    raw += [Step(C, "note:2", 0), Step(U, "note:2", 1), Step(D, "note:2")]
    assert coalesce(raw) == [Step(C, "note:1", 19)]
    # the same through the routes enqueue stores
    routed = [replace(s, endpoint=e, method=m) for s in raw for e, m in [_routed(s)]]
    assert [s.payload for s in coalesce(routed)] == [19]


def _routed(step: Step) -> tuple[str | None, str | None]:
    return route(step.type, step.entity, None, None)
