"""The requests a rehearsal sends: the app's makers, or its OpenAPI document's examples."""

from __future__ import annotations

import random

import pytest

from pigeon.exceptions import ConfigurationError
from pigeon.rehearse.hooks import RehearsalHooks, Request, make_request
from pigeon.rehearse.makers import Makers, examples_of, openapi_makers


def _write(schema: dict[str, object], **extra: object) -> dict[str, object]:
    return {
        "x-pigeon-idempotent": True,
        "requestBody": {"content": {"application/json": {"schema": schema}}},
        **extra,
    }


DOCUMENT = {
    "paths": {
        "/answers": {"post": _write({"type": "object", "examples": [{"a": 1}, {"a": 2}]})},
        "/notes/{id}": {
            "put": _write({"examples": [{"title": "t"}]}, **{"x-pigeon-path-id": "id"}),
            "get": {"responses": {}},
        },
        "/plain": {"post": _write({"type": "object"})},  # no example: not replayed
        "/outside": {"post": {"requestBody": {"content": {}}}},  # not an intake write
    }
}


def test_each_idempotent_write_with_examples_gets_a_maker() -> None:
    assert sorted(openapi_makers(DOCUMENT)) == ["POST /answers", "PUT /notes/{id}"]


def test_the_examples_are_replayed_in_turn() -> None:
    make = openapi_makers(DOCUMENT)["POST /answers"]
    rng = random.Random(0)
    assert [make(n, rng).body for n in range(3)] == [{"a": 1}, {"a": 2}, {"a": 1}]


def test_a_path_parameter_gets_a_fresh_id_the_body_names_too() -> None:
    made = openapi_makers(DOCUMENT)["PUT /notes/{id}"](4, random.Random(0))
    assert made.method == "PUT" and made.path.startswith("/notes/r4x")
    assert made.body == {"title": "t", "id": made.path.rsplit("/", 1)[1]}


def test_media_type_examples_count_too() -> None:
    media = {"example": {"b": 1}, "examples": {"one": {"value": {"c": 1}}}, "schema": {}}
    operation = {"requestBody": {"content": {"application/json": media}}}
    assert examples_of(operation) == [{"c": 1}, {"b": 1}]


def test_makers_go_round_the_routes_and_plan_each_under_its_own_key() -> None:
    makers = Makers(openapi_makers(DOCUMENT), seed=1)
    sent = [makers.plan(f"p{i}") for i in range(4)]
    assert [p.request.method for p in sent] == ["POST", "PUT", "POST", "PUT"]
    assert len({p.key for p in sent}) == 4
    assert sent[0].headers["Authorization"] == "Bearer p0.rehearsal"


def test_no_maker_and_no_example_is_said_plainly() -> None:
    with pytest.raises(ConfigurationError, match="publishes no example"):
        Makers({})


def test_a_maker_may_return_a_body_or_a_request() -> None:
    assert make_request("POST /orders", {"sku": "A"}) == Request("POST", "/orders", {"sku": "A"})
    whole = Request("PUT", "/orders/o1", {"sku": "A"})
    assert make_request("PUT /orders/{id}", whole) is whole
    with pytest.raises(ConfigurationError, match="needs a Request"):
        make_request("PUT /orders/{id}", {"sku": "A"})


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        ({"requests": {"orders": lambda n, rng: {}}}, "is no route"),
        ({"tables": ("orders; DROP TABLE x",)}, "no plain table name"),
    ],
)
def test_hooks_refuse_what_they_cannot_use(hooks: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RehearsalHooks(**hooks)  # type: ignore[arg-type]
