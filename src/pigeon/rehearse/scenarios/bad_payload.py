"""``bad-payload``: bodies a route must refuse, made from the schema its OpenAPI document
publishes (`pigeon.rehearse.fuzz`): each must be answered 4xx, and nothing of any of them
may be written (no record, job, effect, outbox message or row of the app's tables). Then
the "odd" ones, the same mutations where the schema lets them through (a loose schema, or
none): the app may take or refuse them, never fail on them.

Each body is sent once, under a key and as a principal of its own. A 5xx, no answer, or
(for a refused one) a 2xx is a failure named with the body that caused it.
"""

from __future__ import annotations

import random
from typing import Any

import httpx

from pigeon.rehearse.fuzz import BadBody, fuzz
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


def _send(stage: Stage, request: Request, body: BadBody, principal: str) -> httpx.Response | None:
    return stage.client.send(stage.makers.plan(principal, request), content=body.content)


Sent = list[tuple[Request, BadBody]]


def _bodies(stage: Stage, rng: random.Random) -> tuple[Sent, Sent]:
    """(bodies the schemas refuse, odd bodies they let through), with their requests."""
    refused: Sent = []
    odd: Sent = []
    for route in stage.makers.routes:
        sample = stage.makers.next_for(route)
        schema, required = _schema(_operation(stage, route))
        extra = EXTRA_PER_SCALE * stage.scale
        found = fuzz(schema, sample.body, stage.document, rng, required=required, extra=extra)
        refused += [(sample, body) for body in found.refused]
        odd += [(sample, body) for body in found.odd]
    return refused, odd


def _round(
    stage: Stage, result: ScenarioResult, bodies: Sent, tag: str, allowed: range
) -> list[str]:
    """Each body sent once as ``<tag><n>``: what was answered outside ``allowed``."""
    wrong: list[str] = []
    for n, (request, body) in enumerate(bodies):
        response = _send(stage, request, body, f"{tag}{n}")
        status = None if response is None else response.status_code
        result.answered(status)
        if status is None or status not in allowed:
            shown = "no answer" if status is None else str(status)
            wrong.append(f"{request.method} {request.path} with {body.label}: {shown}")
    result.requests += len(bodies)
    return wrong


def _named(result: ScenarioResult, what: str, wrong: list[str]) -> None:
    for text in wrong[:SHOWN]:
        result.problem(f"{what}: {text}")
    if len(wrong) > SHOWN:
        result.problem(f"... and {len(wrong) - SHOWN} more bodies {what}")


def _play(stage: Stage, result: ScenarioResult) -> None:
    rng = random.Random(f"bad-payload-{stage.scale}")
    refused, odd = _bodies(stage, rng)
    routes = len(stage.makers.routes)
    result.did(
        f"sent {len(refused)} bodies the published schemas refuse, to {routes} "
        f"route{'s' if routes != 1 else ''}"
    )
    before = stage.ledger.tally()
    wrong = _round(stage, result, refused, "bad-", range(400, 500))
    stage.drain(result, "the refused requests")
    left = stage.ledger.tally() - before
    rec = result.reconciliation
    rec.expected = {table: 0 for table in left.rows}
    rec.found = dict(left.rows)
    rec.counts = {"refused by the schema": len(refused), "odd, let through": len(odd)}
    # Rows after a 2xx are a body the contract refuses, taken; after 4xx only, half-writes.
    how = "taken against the schema" if result.answers.get("2xx") else "half-written"
    for text in rec.problems():
        result.problem(f"{how}: {text}")
    _named(result, "not a 4xx", wrong)
    if odd:
        result.did(
            f"sent {len(odd)} odd bodies the schemas let through (taken or refused, never 5xx)"
        )
        _named(result, "failed on an odd body", _round(stage, result, odd, "odd-", range(200, 500)))
        stage.drain(result, "the odd requests")
    for principal, n in sorted(stage.ledger.records_of("bad-").items())[:SHOWN]:
        result.problem(f"request {principal} was refused, yet left {n} records")


SCENARIO = Scenario("bad-payload", "bodies the schema refuses: 4xx, nothing half-written", _play)
