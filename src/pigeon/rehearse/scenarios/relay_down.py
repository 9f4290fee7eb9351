"""``relay-down``: the broker the app relays its outbox to is unreachable for a while,
then back. Requests go on being accepted meanwhile; their messages wait in the outbox and
reach the broker once it is back, each exactly once (RabbitMQ, which has no dedup, at
least once: its consumers dedup by message id).

The relay runs beside the server (``pigeon serve --relay-to``) and reaches the broker
through a proxy of the rehearsal's (`pigeon.rehearse.cutproxy`), under names of this
run's own on the broker (`pigeon.rehearse.brokers`). The proxy is cut, requests are sent,
`DOWN` seconds pass, the proxy is restored; then the outbox must drain within `BACK`
seconds and the broker hold every message of those requests.

Skipped when the app relays to no broker (``--relay-to`` not given), or when its
requests write no outbox message.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage
from pigeon.rehearse.tally import SQL

PER_SCALE = 6
DOWN = 3.0  # seconds the broker stays unreachable after the requests
BACK = 60.0  # seconds the outbox may take to drain once the broker is back


def _outbox_after(stage: Stage, after: int) -> list[dict[str, Any]]:
    with stage.ledger.db.transaction() as tx:
        rows: list[dict[str, Any]] = SQL.run(tx, "outbox_after", {"after": after}).fetchall()
    return rows


def _last(stage: Stage) -> int:
    with stage.ledger.db.transaction() as tx:
        return int(SQL.run(tx, "outbox_last").fetchone()["id"])


def _published(stage: Stage, after: int, timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if all(r["published_at"] is not None for r in _outbox_after(stage, after)):
            return time.monotonic() - start
        time.sleep(0.2)
    return None


def _play(stage: Stage, result: ScenarioResult) -> None:
    if stage.broker is None or stage.proxy is None:
        result.skip("the app relays to no broker (give --relay-to redis://, nats:// or amqp://)")
        return
    _published(stage, 0, BACK)  # what earlier scenarios queued, out first
    after = _last(stage)
    jobs = stage.ledger.tally().rows["jobs"]
    stage.proxy.cut()
    count = PER_SCALE * stage.scale
    result.did(f"cut the broker off; sent {count} requests")
    for i in range(count):
        # Once: the intake must take a request whether or not the broker answers.
        response = stage.client.send(stage.makers.plan(f"relay-{i}"))
        status = None if response is None else response.status_code
        result.answered(status)
        if status is None or not 200 <= status < 300:
            result.problem(
                f"relay-{i}: answered {status or 'nothing'} while the broker was down: the "
                "request depends on the broker (publish through the outbox)"
            )
    result.requests += count
    time.sleep(DOWN)
    rows = _outbox_after(stage, after)
    if not rows:
        stage.proxy.restore()
        if result.outcome != "failed":
            result.skip("the requests wrote no outbox message: there was nothing to relay")
        return
    waiting = sum(r["published_at"] is None for r in rows)
    stage.proxy.restore()
    result.did(f"{waiting} of {len(rows)} messages waited in the outbox; the broker is back")
    took = _published(stage, after, BACK)
    result.reconciliation.drain_seconds = None if took is None else round(took, 3)
    result.jobs = stage.ledger.tally().rows["jobs"] - jobs
    if took is None:
        result.problem(f"the outbox did not drain within {BACK:.0f} s of the broker's return")
    _check(stage, result, rows, waiting)


def _check(stage: Stage, result: ScenarioResult, rows: list[dict[str, Any]], waiting: int) -> None:
    assert stage.broker is not None
    topics = sorted({r["topic"] for r in rows})
    held = Counter(stage.broker.message_ids(topics))
    ids = [r["message_id"] for r in rows]
    lost = [i for i in ids if held[i] == 0]
    twice = [i for i in ids if held[i] > 1]
    result.reconciliation.counts = {
        "outbox messages": len(ids),
        "waited for the broker": waiting,
        "on the broker": sum(1 for i in ids if held[i]),
        "lost": len(lost),
        "published twice": len(twice),
    }
    if waiting == 0:
        result.problem("no message waited in the outbox while the broker was cut off")
    if lost:
        result.problem(f"{len(lost)} outbox messages never reached the broker")
    if twice and stage.broker.kind != "amqp":
        result.problem(f"{len(twice)} messages are on the broker more than once")


SCENARIO = Scenario("relay-down", "the broker away for a while: every message once", _play)
