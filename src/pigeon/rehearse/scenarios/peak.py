"""``peak``: ``--peak`` times the normal arrival rate (``--rate``) for a while. The backlog
it leaves must drain within what the capacity planner (`pigeon.jobs.planner`) predicts
from normal operation, within a tolerance the report states.

1. Normal operation: requests at the normal rate for `WARM` seconds; what the planner
   would be given is measured there: each queue's service time S (the mean of its
   succeeded attempts, as ``pigeon plan --db`` takes it) and its jobs per request.
2. The plan: with w worker threads per queue and the peak's arrivals λ = peak × rate ×
   jobs per request, the backlog at the peak's end is B = max(0, (λ - w/S) × D) and it
   drains, once arrivals stop, in B × S / w seconds (the planner's net drain).
3. The peak: requests at peak × rate for D seconds, each sent when it is due (open loop),
   then none; the backlog is counted and the time it takes to drain measured.

Passes when every queue drained within `FACTOR` × its prediction + `SLACK` seconds (the
slack covers polling, leases and a loaded machine when the prediction is near zero).
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pigeon.jobs import planner
from pigeon.jobs.stats import service_times
from pigeon.rehearse.client import Answer
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import DRAIN, Scenario, Stage
from pigeon.rehearse.tally import SQL

WARM = 5.0  # seconds of normal operation measured...
WARM_REQUESTS = 10  # ...or this many requests at the normal rate, if that takes longer
PEAK_PER_SCALE = 5.0  # seconds of peak per unit of --scale
FACTOR, SLACK = 1.5, 5.0
SENDERS = 32  # requests in flight at most


@dataclass(frozen=True)
class QueuePlan:
    queue: str
    threads: int
    service: float  # S, seconds
    per_request: float  # jobs of this queue per request
    arrivals: float  # λ at the peak, jobs per second
    backlog: float  # predicted B at the peak's end
    drain: float  # predicted seconds to drain it


def _open_by_queue(stage: Stage) -> dict[str, int]:
    with stage.ledger.db.transaction() as tx:
        rows = SQL.run(tx, "open_by_queue").fetchall()
    return {r["queue"]: int(r["n"]) for r in rows}


def _send_at(stage: Stage, result: ScenarioResult, tag: str, rate: float, seconds: float) -> float:
    """Requests at ``rate`` per second for ``seconds``, each when due; the rate reached."""
    count = max(1, round(rate * seconds))
    start = time.monotonic()
    futures: list[Future[Answer]] = []
    with ThreadPoolExecutor(SENDERS) as pool:
        for i in range(count):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(stage.client.settle, stage.makers.plan(f"{tag}{i}")))
        sent = time.monotonic() - start
        answers = [f.result() for f in futures]
    for answer in answers:
        result.answered(answer.status)
    result.requests += count
    return count / max(sent, 1 / rate)


def _plan(
    stage: Stage, jobs_before: dict[str, int], requests: int, duration: float
) -> list[QueuePlan]:
    plans = []
    per_queue = _jobs_by_queue(stage)
    for queue, made in sorted(per_queue.items()):
        new = made - jobs_before.get(queue, 0)
        if new <= 0 or queue not in stage.threads:
            continue
        samples = service_times(stage.ledger.db, queue, limit=new)
        if not samples:
            continue
        s, w = statistics.fmean(samples), stage.threads[queue]
        per_request = new / requests
        arrivals = stage.peak * stage.rate * per_request
        backlog = max(0.0, (arrivals - planner.throughput(w, s)) * duration)
        drain = planner.drain_seconds(backlog, w, s, 0.0) or 0.0
        plans.append(QueuePlan(queue, w, s, per_request, arrivals, backlog, drain))
    return plans


def _jobs_by_queue(stage: Stage) -> dict[str, int]:
    with stage.ledger.db.transaction() as tx:
        rows = SQL.run(tx, "jobs_by_queue").fetchall()
    return {r["queue"]: int(r["n"]) for r in rows}


def _normal(stage: Stage, result: ScenarioResult) -> list[QueuePlan]:
    """Normal operation, measured: the plan of each queue that got jobs."""
    before = _jobs_by_queue(stage)
    warm = max(WARM_REQUESTS, round(stage.rate * WARM))
    reached = _send_at(stage, result, "peak-w", stage.rate, warm / stage.rate)
    stage.drain(result, "normal operation")
    plans = _plan(stage, before, warm, PEAK_PER_SCALE * stage.scale)
    measured = "; ".join(
        f"{p.queue}: S = {p.service * 1000:.1f} ms, {p.per_request:.2f} jobs a request, "
        f"w = {p.threads}"
        for p in plans
    )
    result.did(f"normal operation: {warm} requests at {reached:.1f}/s; {measured}")
    return plans


def _drain_by_queue(stage: Stage, queues: list[str]) -> dict[str, float | None]:
    """Seconds until each queue had no open job (None: not within `DRAIN`)."""
    start = time.monotonic()
    took: dict[str, float | None] = dict.fromkeys(queues)
    while time.monotonic() - start < DRAIN:
        open_jobs = _open_by_queue(stage)
        for queue in queues:
            if took[queue] is None and not open_jobs.get(queue):
                took[queue] = time.monotonic() - start
        if all(t is not None for t in took.values()) and not open_jobs:
            break
        time.sleep(0.1)
    return took


def _play(stage: Stage, result: ScenarioResult) -> None:
    stage.drain(result, "earlier scenarios")
    made = stage.ledger.tally().rows["jobs"]
    plans = _normal(stage, result)
    if not plans:
        result.skip("the requests made no job: there is no backlog to plan for")
        return
    duration = PEAK_PER_SCALE * stage.scale
    rate = stage.peak * stage.rate
    reached = _send_at(stage, result, "peak-p", rate, duration)
    backlog = _open_by_queue(stage)
    result.did(
        f"peak: {rate:g}/s asked ({stage.peak:g} x {stage.rate:g}/s) for {duration:g} s, "
        f"{reached:.1f}/s reached; backlog at its end: {sum(backlog.values())} jobs"
    )
    took = _drain_by_queue(stage, [p.queue for p in plans])
    result.jobs = stage.ledger.tally().rows["jobs"] - made
    _judge(result, plans, backlog, took)
    stage.drain(result, "the peak")


def _judge(
    result: ScenarioResult,
    plans: list[QueuePlan],
    backlog: dict[str, int],
    took: dict[str, float | None],
) -> None:
    rec = result.reconciliation
    rec.predicted_seconds = round(max(p.drain for p in plans), 3)
    times = [t for t in took.values() if t is not None]
    rec.drain_seconds = round(max(times), 3) if len(times) == len(took) else None
    rec.tolerance = f"{FACTOR:g} x predicted + {SLACK:g} s, per queue"
    for p in plans:
        rec.counts[f"{p.queue}: backlog predicted"] = round(p.backlog)
        rec.counts[f"{p.queue}: backlog found"] = backlog.get(p.queue, 0)
        seconds = took[p.queue]
        bound = FACTOR * p.drain + SLACK
        if seconds is None:
            result.problem(f"queue {p.queue!r} did not drain within {DRAIN:.0f} s of the peak")
        elif seconds > bound:
            result.problem(
                f"queue {p.queue!r} took {seconds:.1f} s to drain after the peak; the planner "
                f"predicted {p.drain:.1f} s from normal operation (S = {p.service * 1000:.1f} ms, "
                f"w = {p.threads}; bound {bound:.1f} s): its jobs ran slower at the peak than "
                "their normal service time says (a lock or resource they share?)"
            )


SCENARIO = Scenario("peak", "several times the normal rate: drains as the planner predicts", _play)
