"""What every scenario plays on (``Stage``: the throwaway database, the server, the workers,
the client, the requests) and the comparison most of them make (``twins``).

Twins: each request a scenario faults has a twin, the same request (the same body, to the
same path) sent as another principal under another key without any fault. After both
groups ran and their jobs drained, the faulted group must have left exactly what the
twins left, table by table: a row more is a duplicate, a row less is lost. The twins go
first, and each group is counted between two drains, so nothing else runs meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pigeon.jobs.app import App
from pigeon.rehearse.brokers import Broker
from pigeon.rehearse.children import Server, Workers
from pigeon.rehearse.client import Answer, Client
from pigeon.rehearse.cutproxy import CutProxy
from pigeon.rehearse.hooks import RehearsalHooks, Request
from pigeon.rehearse.makers import Makers, Planned
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.tally import Ledger, Tally

DRAIN = 120.0  # seconds the jobs of one group may take to drain


@dataclass
class Stage:
    """``scale``: how hard each scenario pushes (its request counts are multiples of it);
    ``rate``: the app's normal arrival rate (requests per second) and ``peak`` the multiple
    of it the ``peak`` scenario sends."""

    server: Server
    workers: Workers
    client: Client
    makers: Makers
    hooks: RehearsalHooks
    ledger: Ledger
    jobs: App
    document: dict[str, Any] = field(default_factory=dict)  # the app's OpenAPI document
    scale: int = 1
    rate: float = 5.0
    peak: float = 4.0
    threads: dict[str, int] = field(default_factory=dict)
    next_jobs: str | None = None  # the next version's jobs (module:attr), for a deploy
    broker: Broker | None = None  # the app's broker, under this run's names
    proxy: CutProxy | None = None  # between the relay and the broker

    def restart_server(self) -> None:
        """After a kill: the same server again on its port, a new client connection."""
        self.server.start()
        self.client.close()
        self.client = Client(self.server.url)

    def drain(self, result: ScenarioResult, what: str) -> float | None:
        """Wait for the jobs; a problem if they do not drain within `DRAIN` seconds."""
        if not self.workers.running:
            result.problem(f"the workers are not running: the jobs of {what} cannot drain")
            return None
        seconds = self.ledger.drain(DRAIN)
        if seconds is None:
            open_jobs = self.ledger.open_jobs()
            result.problem(f"{open_jobs} jobs of {what} were still open after {DRAIN:.0f} s")
        return seconds


Fault = Callable[[Planned], Answer]
GroupFault = Callable[[list[Planned]], list[Answer]]  # the faulted group, sent as a whole


def one_by_one(fault: Fault) -> GroupFault:
    """A group fault that sends each request through ``fault`` in turn."""
    return lambda planned: [fault(p) for p in planned]


@dataclass(frozen=True)
class Scenario:
    """One failure of the list: ``play`` runs it on the stage and fills in the result
    (``result.skip(reason)`` when it cannot run for this app)."""

    name: str
    summary: str
    play: Callable[[Stage, ScenarioResult], None]


def twins(
    stage: Stage,
    result: ScenarioResult,
    tag: str,
    count: int,
    fault: GroupFault,
    between: Callable[[], None] | None = None,
) -> list[tuple[Planned, Answer, Answer]]:
    """Send ``count`` requests without a fault (the twins, as ``<tag>-c<i>``), then the
    same requests through ``fault`` (as ``<tag>-f<i>``; `one_by_one` sends each in turn),
    each to its final answer; compare
    what each group left (``result.reconciliation``) and each answer with its twin's.
    ``between``: called once the twins' jobs drained (to switch a fault on).
    Returns (faulted request, its answer, its twin's answer) for the scenario's own checks."""
    requests: list[Request] = [stage.makers.next() for _ in range(count)]
    before = stage.ledger.tally()
    calm = [
        stage.client.settle(stage.makers.plan(f"{tag}-c{i}", r)) for i, r in enumerate(requests)
    ]
    stage.drain(result, "the twins")
    middle = stage.ledger.tally()
    if between is not None:
        between()
    planned = [stage.makers.plan(f"{tag}-f{i}", r) for i, r in enumerate(requests)]
    faulted = fault(planned)
    stage.drain(result, "the faulted requests")
    after = stage.ledger.tally()
    result.requests += 2 * count
    for answer in faulted:
        result.answered(answer.status)
    _reconcile(result, middle - before, after - middle)
    _compare_records(stage, result, tag)
    _compare_answers(result, planned, faulted, calm)
    return list(zip(planned, faulted, calm, strict=True))


def _reconcile(result: ScenarioResult, twins_left: Tally, faulted_left: Tally) -> None:
    rec = result.reconciliation
    rec.expected = dict(twins_left.rows)
    rec.found = dict(faulted_left.rows)
    rec.failed_with_owner += faulted_left.states["failed_with_owner"]
    rec.failed_without_owner += faulted_left.states["failed_without_owner"]
    result.jobs += faulted_left.rows.get("jobs", 0)
    for text in rec.problems():
        result.problem(text)
    done, twins_done = faulted_left.states["succeeded_jobs"], twins_left.states["succeeded_jobs"]
    if done < twins_done:
        result.problem(
            f"{twins_done - done} fewer jobs succeeded than for the twins ({done} of {twins_done})"
        )


def _compare_records(stage: Stage, result: ScenarioResult, tag: str) -> None:
    """Records per request: each faulted request as many as its twin (by principal)."""
    calm = stage.ledger.records_of(f"{tag}-c")
    faulted = stage.ledger.records_of(f"{tag}-f")
    for principal, n in sorted(faulted.items()):
        twin = calm.get(principal.replace(f"{tag}-f", f"{tag}-c", 1), 0)
        if n > twin:
            result.problem(f"request {principal} left {n} records where its twin left {twin}")


def _compare_answers(
    result: ScenarioResult, planned: list[Planned], faulted: list[Answer], calm: list[Answer]
) -> None:
    for p, answer, twin in zip(planned, faulted, calm, strict=True):
        where = f"{p.request.method} {p.request.path} ({p.principal})"
        if answer.status is None:
            result.problem(f"{where}: no final answer after {answer.attempts} attempts")
        elif answer.status != twin.status:
            result.problem(f"{where}: answered {answer.status} where its twin got {twin.status}")


def timed(result: ScenarioResult, run: Callable[[], None]) -> None:
    start = time.monotonic()
    try:
        run()
    finally:
        result.seconds = round(time.monotonic() - start, 3)
