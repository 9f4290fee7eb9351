"""``bad-payload``: bodies a route must refuse, made from the schema its OpenAPI document
publishes (`pigeon.rehearse.fuzz`): each must be answered 4xx, and nothing of any of them
may be written (no record, job, effect, outbox message or row of the app's tables).

Each body is sent once, under a key and as a principal of its own. A 5xx, a 2xx or no
answer at all is a failure named with the body that caused it.
"""

from __future__ import annotations

import random
from typing import Any

import httpx

from pigeon.rehearse.fuzz import BadBody, bad_bodies
from pigeon.rehearse.hooks import Request
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage

EXTRA_PER_SCALE = 10  # random mixes per route, besides the systematic bodies
SHOWN = 5  # refusals named in full; the rest counted


def _operation(stage: Stage, route: str) -> dict[str, Any]:
    method, _, path = route.partition(" ")
    found: dict[str, Any] = stage.document.get("paths", {}).get(path, {}).get(method.lower(), {})
    return found


def _schema(operation: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    body = operation.get("requestBody", {})
    schema = body.get("content", {}).get("application/json", {}).get("schema")
    return (schema or None), bool(body.get("required", True))


def _send(stage: Stage, request: Request, body: BadBody, n: int) -> httpx.Response | None:
    planned = stage.makers.plan(f"bad-{n}", request)
    headers = planned.headers | {"Content-Type": "application/json"}
    try:
        return stage.client.http.request(
            request.method, request.path, content=body.content, headers=headers
        )
    except httpx.TransportError:
        return None


def _bodies(stage: Stage, rng: random.Random) -> list[tuple[Request, BadBody]]:
    found = []
    for route in stage.makers.routes:
        sample = stage.makers.next_for(route)
        schema, required = _schema(_operation(stage, route))
        extra = EXTRA_PER_SCALE * stage.scale
        for body in bad_bodies(
            schema, sample.body, stage.document, rng, required=required, extra=extra
        ):
            found.append((sample, body))
    return found


def _play(stage: Stage, result: ScenarioResult) -> None:
    rng = random.Random(f"bad-payload-{stage.scale}")
    bodies = _bodies(stage, rng)
    routes = len(stage.makers.routes)
    result.did(f"sent {len(bodies)} bodies the published schemas refuse, to {routes} routes")
    before = stage.ledger.tally()
    wrong: list[str] = []
    for n, (request, body) in enumerate(bodies):
        response = _send(stage, request, body, n)
        status = None if response is None else response.status_code
        result.answered(status)
        if status is None or not 400 <= status < 500:
            shown = "no answer" if status is None else str(status)
            wrong.append(f"{request.method} {request.path} with {body.label}: {shown}")
    result.requests += len(bodies)
    stage.drain(result, "the refused requests")
    left = stage.ledger.tally() - before
    rec = result.reconciliation
    rec.expected = {table: 0 for table in left.rows}
    rec.found = dict(left.rows)
    for text in rec.problems():
        result.problem(f"half-written: {text}")
    for principal, n in sorted(stage.ledger.records_of("bad-").items())[:SHOWN]:
        result.problem(f"request {principal} was refused, yet left {n} records")
    for text in wrong[:SHOWN]:
        result.problem(f"not a 4xx: {text}")
    if len(wrong) > SHOWN:
        result.problem(f"... and {len(wrong) - SHOWN} more bodies not answered 4xx")


SCENARIO = Scenario("bad-payload", "bodies the schema refuses: 4xx, nothing half-written", _play)
