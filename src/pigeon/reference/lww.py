"""Last-write-wins collections: the server decides, by hybrid logical clock.

``PUT /<collection>/{id}`` (and ``POST /<collection>`` with an ``id`` in the body, and
``DELETE``) writes iff the operation's stamp supersedes the stored one (see
`pigeon.reference.conflicts.Stamped`); ``If-Match`` is not consulted, the clock is. An older
write is acknowledged, 200 with ``{"outcome": "lost", "current": ...}``, and changes
nothing; a newer one answers ``{"outcome": "won" | "created", "current": ...}``. Either way
the write, its stamps and its payload are recorded in ``write_outcomes`` and its key in
the effect ledger: an edit that lost is never dropped without a trace. A delete leaves a
tombstone with its stamp, so a late older write loses to it instead of resurrecting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pigeon.core.wire import ETAG, PROBLEM_JSON, quote_etag
from pigeon.exceptions import ValidationError
from pigeon.reference import conflicts as cf
from pigeon.server import contract
from pigeon.server import identifiers as ids
from pigeon.server.intake import HandlerResult, Intake, IntakeContext
from pigeon.server.problems import problem


def _bad(detail: str) -> ValidationError:
    return ValidationError(detail, slug="bad-resource")


# A resource is a JSON object; on POST its "id" names it (a string or a number); on PUT
# the body's id, when given, is the path's (x-pigeon-path-id).
_ID = {"anyOf": [contract.RESOURCE_ID, contract.INTEGER_ID]}
RESOURCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"id": _ID},
    "x-pigeon-path-id": "id",
}
CREATE_SCHEMA: dict[str, Any] = {"type": "object", "required": ["id"], "properties": {"id": _ID}}


def validate_resource(body: Any, path_params: Mapping[str, Any]) -> None:
    """Before the claim (and again in the handlers): an id that agrees with the path's
    and fits the store."""
    if not isinstance(body, dict):
        raise _bad("a resource is a JSON object")
    body_id, path_id = body.get("id"), path_params.get("id")
    if path_id is None and body_id in (None, ""):
        raise _bad("a new resource needs an 'id'")
    if path_id is not None and body_id is not None:
        refused = ids.id_problem(body_id, "body.id")
        if refused is not None:
            raise _bad(refused)
        if ids.resource_id(body_id) != str(path_id):
            raise _bad(f"the body names {body_id!r} but the path names {path_id!r}")
    refused = ids.id_problem(path_id if path_id is not None else body_id)
    if refused is not None:
        raise _bad(refused)


class LwwCollection:
    """The handlers of one last-write-wins collection, registered on an intake."""

    def __init__(self, name: str, *, max_skew: float = cf.DEFAULT_MAX_SKEW) -> None:
        self.name = name
        self.max_skew_ms = int(max_skew * 1000)

    def register(self, intake: Intake) -> None:
        for method, path, handler, schema in (
            ("POST", f"/{self.name}", self.create, CREATE_SCHEMA),
            ("PUT", f"/{self.name}/{{id}}", self.replace, RESOURCE_SCHEMA),
        ):
            intake.add_operation(
                method, path, handler, request_schema=schema, validate=validate_resource
            )
        intake.add_operation("DELETE", f"/{self.name}/{{id}}", self.delete)

    def create(self, ctx: IntakeContext) -> HandlerResult:
        validate_resource(ctx.body, ctx.path_params)
        resource_id = ids.resource_id(ctx.body["id"])
        return self._write(ctx, resource_id, _without_id(ctx.body), deleted=False)

    def replace(self, ctx: IntakeContext) -> HandlerResult:
        validate_resource(ctx.body, ctx.path_params)
        resource_id = str(ctx.path_params["id"])
        return self._write(ctx, resource_id, _without_id(ctx.body), deleted=False)

    def delete(self, ctx: IntakeContext) -> HandlerResult:
        resource_id = str(ctx.path_params["id"])
        row = cf.load(ctx, self.name, resource_id)
        if row is None:
            body = problem(404, "no-such-resource", "Not found", f"no {self.name} {resource_id!r}")
            return 404, body, {"content-type": PROBLEM_JSON}
        return self._write(ctx, resource_id, None, deleted=True)

    def _write(
        self, ctx: IntakeContext, resource_id: str, data: Any, *, deleted: bool
    ) -> HandlerResult:
        refused = ids.id_problem(resource_id)
        if refused is not None:
            raise _bad(refused)
        stamped = cf.Stamped.of(ctx, self.max_skew_ms)
        row = cf.load(ctx, self.name, resource_id)
        if row is None:
            created = cf.store(ctx, self.name, resource_id, data or {}, stamped, deleted=deleted)
            if created is not None:
                cf.ledger(ctx, created, 201)
                return _answer(created, "created", 201)
            # Another device's first write got in first: the clocks decide between the two.
            row = cf.load(ctx, self.name, resource_id)
            assert row is not None
        current = cf.Stamped.stored(row)
        if not stamped.supersedes(current):
            cf.record(ctx, row, "lost", stamped, data, row["clock"])
            cf.ledger(ctx, row, 200)
            return _answer(row, "lost", 200)
        # A delete keeps the last data under the tombstone: what was deleted stays readable.
        kept = row_data(row) if deleted else data
        row = cf.store(ctx, self.name, resource_id, kept, stamped, deleted=deleted)
        assert row is not None  # it exists, locked by load: an update
        cf.record(ctx, row, "won", stamped, data, current.effective.encode())
        cf.ledger(ctx, row, 200)
        return _answer(row, "won", 200)


def row_data(row: dict[str, Any]) -> Any:
    return cf.resource_json(row)["data"]


def _without_id(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "id"}


def _answer(row: dict[str, Any], outcome: str, status: int) -> HandlerResult:
    body = {"outcome": outcome, "current": cf.resource_json(row)}
    return status, body, {ETAG: quote_etag(str(row["version"]))}
