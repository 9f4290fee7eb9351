"""The intake's contract as an OpenAPI 3.1 document, served at ``/pigeon/v1/openapi.json``.

Generated from the registered operations and the live policy, so the published retention
and lock timeouts are the ones in force.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jsonschema
from starlette.routing import BaseRoute, Route

from pigeon.core.wire import (
    BATCH_PATH,
    HEALTH_PATH,
    IDEMPOTENCY_KEY,
    MAX_BATCH,
    MAX_JSON_DEPTH,
    MAX_KEY_LENGTH,
    PROBLEM_JSON,
    PROBLEM_KEY_IN_PROGRESS,
    REPLAYED,
    RETRY_AFTER,
)
from pigeon.server import contract
from pigeon.server.access import Guarded, Rule
from pigeon.server.contract import SCHEMA_REF
from pigeon.server.idempotency import CLAIM_WAIT
from pigeon.server.openapi_components import document_components
from pigeon.server.options import BodyLimits

if TYPE_CHECKING:
    from pigeon.server.intake import Intake

OPENAPI_PATH = "/pigeon/v1/openapi.json"
_PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?}")

_DESCRIPTION = """\
Every write operation (the ones taking the `{key}` header) runs exactly once per
(principal, key). The key is 1-{max_len} printable characters, sent once; the principal
comes from authentication, so a refreshed token of the same principal still replays and
another principal never sees the response.

- Same key, same request (method, path, canonical JSON body): the stored status and body
  with `{replayed}: true`. Stored responses are kept {resp} s; after that, for up to
  {claim} s from the first request, the key answers `200 {{"status": "already_applied",
  "operation_id": ...}}` (with the original status instead of 200 when that was a
  refusal, and for a refused conflict the entity's `current` state where the operation
  gives it) and `{replayed}: true`, never a second effect.
- Same key still running: `409` problem (type key-in-progress) with `{retry}` (the
  expected remaining seconds), {wait_rule}; never held for the original's whole
  duration. A request whose process died is retryable at once (its claim dies with its
  transaction), or, where the claim was committed before the work, after the lock
  timeout of {lock} s.
- Same key, different request: `422` problem; the original is untouched.
- Missing, empty, over-long or repeated key: `400` problem; nothing ran.
- A body that is not JSON, or that the operation's declared validation refuses (its
  request schema below): `400` (or a validator's `422`) problem, answered BEFORE the key
  is claimed: nothing is stored, and the corrected request runs under the same key.
- 2xx and 4xx answers are stored, except 401, 403, 408, 425 and 429, which the client
  sends again; those, a 5xx or a crash store nothing, so a retry runs.
- Store unavailable: `503` with `{retry}`; nothing runs without dedup.
- A request body over {max_body} bytes ({max_batch_body} for a batch): `413` problem,
  before the body is read whole; nothing ran, the key is not taken.
- A body that is not strict JSON (NaN or Infinity, a number beyond a double, a repeated
  object key, a lone UTF-16 surrogate, a NUL character, nesting deeper than {depth}
  levels, bytes that are not UTF-8): `400` problem whose `json_error` names the class;
  an identifier or stored header outside its limits (ids: 1-255 printable characters,
  no `/`; operation id and `If-Match` at most 255; a clock stamp's node at most 64), or
  a control character in the path: `400` problem. Nothing ran, the key is not taken.
- The server closes a connection that sends no request for a while, and answers `408`
  to a request head that does not arrive in time (`pigeon serve --timeout-*`).
"""


def _problem(description: str, *headers: str) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    if headers:
        response["headers"] = {h: {"$ref": f"#/components/headers/{h}"} for h in headers}
    return response


def _access_responses(rule: Rule | None) -> dict[str, Any]:
    """What the access layer answers on a read route (`pigeon.server.access`)."""
    if rule is Rule.OPERATOR:
        return {
            "401": _problem("Operator credentials required (none, or not valid)"),
            "404": _problem("Not found: also the answer to a signed-in user, who is no operator"),
        }
    if rule in (Rule.USER, Rule.OWNER):
        refusals = {"401": _problem("Authentication required, or the credentials are not valid")}
        if rule is Rule.USER:
            refusals["403"] = _problem("The operator credential acts for no user")
        refusals["404"] = _problem("Not found, or not the caller's (never told apart)")
        return refusals
    return {}


def _path_params(path: str) -> list[dict[str, Any]]:
    # Every path parameter is one identifier (`pigeon.server.identifiers`): 400 otherwise.
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"$ref": SCHEMA_REF + "ResourceId"},
        }
        for name in _PARAM.findall(path)
    ]


_USER: list[dict[str, list[str]]] = [{"user": []}]
_OPERATOR: list[dict[str, list[str]]] = [{"operator": []}]


def _security(rule: Rule | None) -> list[dict[str, list[str]]]:
    if rule is Rule.OPERATOR:
        return _OPERATOR
    if rule is Rule.OWNER:
        return [*_USER, *_OPERATOR]
    return _USER if rule is Rule.USER else []


def _body(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A route's request body: its declared schema (any JSON without one), required when
    the schema refuses no body at all. What the strict decoder takes anywhere in a body
    is the ``JsonValue`` component (``x-pigeon-json``): a schema of its own, not folded
    into each body's, whose recursion made generating test data slow and unreliable."""
    if schema is None:
        return {"required": False, "schema": {}}
    required = not jsonschema.Draft202012Validator(schema).is_valid(None)
    return {"required": required, "schema": _referenced(schema)}


_SHARED = {id(contract.RESOURCE_ID): "ResourceId", id(contract.INTEGER_ID): "IntegerId"}


def _referenced(schema: Any) -> Any:
    """``schema`` with each of the contract's shared schemas (the very objects a route's
    schema holds) as a ``$ref`` to its component: the 4 KB id rule is published once."""
    if id(schema) in _SHARED:
        return {"$ref": SCHEMA_REF + _SHARED[id(schema)]}
    if isinstance(schema, Mapping):
        return {key: _referenced(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_referenced(item) for item in schema]
    return schema


def _too_large(limit: int, what: str) -> dict[str, Any]:
    return _problem(
        f"The request body is over the limit of {limit} bytes for {what} (a Content-Length "
        "over it is refused before the body is read); nothing was executed or stored"
    )


def _write_operation(
    method: str, path: str, max_body: int, schema: Mapping[str, Any] | None
) -> dict[str, Any]:
    body = _body(schema)
    operation: dict[str, Any] = {
        "operationId": f"{method.lower()}_{re.sub(r'[^a-zA-Z0-9]+', '_', path).strip('_')}",
        "summary": f"{method} {path} (idempotent write)",
        "security": _USER,
        "parameters": [
            {"$ref": "#/components/parameters/IdempotencyKey"},
            {"$ref": "#/components/parameters/IfMatch"},
            {"$ref": "#/components/parameters/Clock"},
            {"$ref": "#/components/parameters/OperationId"},
            *_path_params(path),
        ],
        "requestBody": {
            "required": body["required"],
            "description": f"At most {max_body} bytes",
            "content": {"application/json": {"schema": body["schema"]}},
        },
        "responses": _write_responses(max_body),
        "x-pigeon-idempotent": True,
        "x-pigeon-json": {"$ref": SCHEMA_REF + "JsonValue"},
    }
    if schema is not None and "x-pigeon-path-id" in schema:
        # What no JSON Schema can say: the body's id, when given, is the path's.
        operation["x-pigeon-path-id"] = schema["x-pigeon-path-id"]
    return operation


_UNSUPPORTED = _problem(
    "A body that is not declared JSON: a Content-Type other than application/json or a "
    "+json type, or none at all; nothing ran, the key is not taken"
)


def _write_responses(max_body: int) -> dict[str, Any]:
    """What an idempotent write may answer: the intake's own statuses, and the classes
    of the operation's own answers."""
    return {
        "2XX": {
            "description": f"Applied now, or replayed when {REPLAYED} is set",
            "headers": {REPLAYED: {"$ref": f"#/components/headers/{REPLAYED}"}},
            "content": {"application/json": {"schema": {}}},
        },
        "400": _problem(
            "Missing or malformed Idempotency-Key, a body that is not strict JSON "
            "(`json_error` names the problem), an identifier, header or path outside "
            "its limits, or a body the operation's declared validation refuses (its "
            "request schema): checked before the key is claimed, so nothing is stored "
            "and the corrected request runs under the same key"
        ),
        "401": _problem("Authentication required, or the credentials are not valid"),
        "404": _problem("No such entity (the operation's own answer, stored and replayed)"),
        "409": _problem(
            f"The same key is still in progress (type {PROBLEM_KEY_IN_PROGRESS}, with "
            f"{RETRY_AFTER}: send it again later); any other 409 is the operation's own "
            "conflict, stored and replayed like any refusal",
            RETRY_AFTER,
        ),
        "413": _too_large(max_body, "one operation"),
        "415": _UNSUPPORTED,
        "422": _problem(
            "The key was used for a different request (type key-reused), or the "
            "operation's own validation refused the body (not stored, as for 400)"
        ),
        # The operation's own answers: which ones depends on the application, so only
        # their classes are promised, with both media types a handler may answer in.
        "4XX": {
            "description": (
                "The operation's own refusal (e.g. 404, 409, a stale If-Match's 412 "
                "with the current state), stored under the key and replayed; 401, "
                "403, 408, 425 and 429 are not stored: send the same key again"
            ),
            "headers": {REPLAYED: {"$ref": f"#/components/headers/{REPLAYED}"}},
            "content": {
                "application/json": {"schema": {}},
                PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}},
            },
        },
        "503": _problem("Idempotency store unavailable; nothing was executed", RETRY_AFTER),
        "5XX": _problem("The operation failed; nothing of it was kept, the same key runs it again"),
    }


def build_openapi(
    intake: Intake,
    *,
    title: str = "pigeon intake",
    extra_routes: Sequence[BaseRoute] = (),
    limits: BodyLimits | None = None,
) -> dict[str, Any]:
    limits = limits or BodyLimits()
    max_body, max_batch_body = limits.max_body, limits.max_batch_body
    paths: dict[str, dict[str, Any]] = {}
    for route in intake.routes:
        path = _PARAM.sub(r"{\1}", route.template)
        paths.setdefault(path, {})[route.method.lower()] = _write_operation(
            route.method, path, max_body, route.request_schema
        )
    _add_read_routes(paths, extra_routes)
    paths[BATCH_PATH] = _batch_operation(intake, max_batch_body)
    paths[HEALTH_PATH] = _health()
    return {
        "openapi": "3.1.0",
        "info": _info(intake, title, max_body, max_batch_body),
        "paths": paths,
        "components": document_components(),
        "x-pigeon-idempotency": _idempotency(intake),
        "x-pigeon-limits": {
            "max_body_bytes": max_body,
            "max_batch_body_bytes": max_batch_body,
            "max_batch_operations": MAX_BATCH,
        },
    }


def _add_read_routes(paths: dict[str, dict[str, Any]], extra_routes: Sequence[BaseRoute]) -> None:
    """The application's own routes (reads: no key needed), with what each may answer."""
    for extra in extra_routes:
        rule = extra.rule if isinstance(extra, Guarded) else None
        read = extra.route if isinstance(extra, Guarded) else extra
        if not isinstance(read, Route) or not read.include_in_schema:
            continue
        path = _PARAM.sub(r"{\1}", read.path)
        for method in sorted((read.methods or set()) - {"HEAD"}):
            paths.setdefault(path, {})[method.lower()] = {
                "summary": f"{method} {path} (read, no key needed)",
                "security": _security(rule),
                "parameters": _path_params(path),
                # Every status a read route answers: a problem for each refusal, and
                # what the access layer answers for its rule (`pigeon.server.access`).
                "responses": {
                    "200": {"description": "OK"},
                    "400": _problem(
                        "A path parameter that is no identifier, or a query parameter that "
                        "is not an integer in its range"
                    ),
                    "404": _problem("No such resource (or not this principal's)"),
                    **_access_responses(rule),
                },
            }


def _batch_operation(intake: Intake, max_batch_body: int) -> dict[str, Any]:
    unavailable = "Idempotency store unavailable; nothing was executed"
    if intake.options.batch_chunk is not None:  # the chunks before the failure have committed
        unavailable += (
            f" after the chunks (of {intake.options.batch_chunk} operations) already committed, "
            "which the batch sent again replays"
        )
    return {
        "post": {
            "operationId": "pigeon_batch",
            "security": _USER,
            "summary": "Apply operations in order, one transaction, one savepoint and key each",
            "description": (
                "Each entry carries its own `idempotency_key` and gets the same treatment as "
                "a single request. An entry is judged on its own: one outside "
                "`BatchOperation` (`x-pigeon-entry`) gets a 400 result and the others run. "
                "Permanent failures (4xx) roll back to their savepoint and "
                "the batch goes on; the first transient failure (5xx, 409 in progress, "
                "401/403/408/425/429) ends "
                "it, so `results` may be shorter than `operations`."
            ),
            "requestBody": {
                "required": True,
                "description": f"At most {max_batch_body} bytes",
                "content": {"application/json": {"schema": {"$ref": SCHEMA_REF + "Batch"}}},
            },
            "x-pigeon-json": {"$ref": SCHEMA_REF + "JsonValue"},
            "x-pigeon-entry": {"$ref": SCHEMA_REF + "BatchOperation"},
            "responses": {
                "200": {
                    "description": "One result per processed operation, in order",
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/BatchResults"}
                        }
                    },
                },
                "400": _problem(
                    "Not a batch: not strict JSON (`json_error` names the problem), not "
                    f'{{"operations": [...]}}, or more than {MAX_BATCH} operations'
                ),
                "401": _problem("Authentication required"),
                "413": _too_large(
                    max_batch_body, "a batch; send its operations in smaller batches"
                ),
                "415": _UNSUPPORTED,
                "503": _problem(unavailable, RETRY_AFTER),
            },
        }
    }


def _health() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "pigeon_health",
            "security": [],
            "summary": "Cheap liveness probe for connectivity monitors",
            "responses": {"200": {"description": "The server is reachable"}},
        }
    }


def _info(intake: Intake, title: str, max_body: int, max_batch_body: int) -> dict[str, Any]:
    policy = intake.options.policy
    return {
        "title": title,
        "version": "1",
        "description": _DESCRIPTION.format(
            key=IDEMPOTENCY_KEY,
            max_len=MAX_KEY_LENGTH,
            replayed=REPLAYED,
            retry=RETRY_AFTER,
            resp=int(policy.response_retention),
            claim=int(policy.claim_retention),
            lock=int(policy.lock_timeout),
            wait_rule=(
                f"after waiting up to {intake.options.in_progress_wait} s for the original, whose "
                "stored response it gets if it finishes by then"
                if intake.options.in_progress_wait
                else f"at once (across server processes on PostgreSQL within {CLAIM_WAIT} s)"
            ),
            max_body=max_body,
            max_batch_body=max_batch_body,
            depth=MAX_JSON_DEPTH,
        ),
    }


def _idempotency(intake: Intake) -> dict[str, Any]:
    policy = intake.options.policy
    return {
        "header": IDEMPOTENCY_KEY,
        "key_max_length": MAX_KEY_LENGTH,
        "key_scope": "principal",
        "fingerprint": "method, path, canonical JSON body (sorted keys, no whitespace)",
        "replay_header": REPLAYED,
        "response_retention_seconds": policy.response_retention,
        "claim_retention_seconds": policy.claim_retention,
        "lock_timeout_seconds": policy.lock_timeout,
        "claim_mode": intake.options.claim_mode,
    }
