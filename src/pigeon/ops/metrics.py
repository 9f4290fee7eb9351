"""``/metrics``: `pigeon.ops.queries.overview` in Prometheus exposition, read from the
database at each scrape (every process and node exports the same figures). The alert rules
in ``ops/prometheus/pigeon-rules.yml`` name only metrics exported here (a test checks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

from pigeon.ops.queries import DURATION_BUCKETS, JOB_STATES, OBLIGATION_STATES


class OpsCollector:
    """A prometheus_client collector that reads the database at each scrape."""

    def __init__(self, source: Callable[[], dict[str, Any]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        view = self.source()
        yield from _records(view)
        yield from _obligations(view)
        yield from _queues(view)
        yield from _failed(view)
        yield from _health(view)
        yield from _lifecycle(view)
        yield from _versions(view)


def exposition(source: Callable[[], dict[str, Any]]) -> Callable[[], tuple[bytes, str]]:
    """``/metrics``' answer: a registry of its own holding an `OpsCollector` of ``source``;
    each call (a scrape) reads the figures and gives the body and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpsCollector(source))
    return lambda: (generate_latest(registry), CONTENT_TYPE_LATEST)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _records(view: dict[str, Any]) -> Iterator[Metric]:
    records = _gauge(
        "pigeon_records", "Records accepted in the window (window_seconds), by status.", ["status"]
    )
    for status in ("received", "completed", "open"):
        records.add_metric([status], view["records"][status])
    yield records
    window = _gauge("pigeon_window_seconds", "The window the record figures count.", [])
    window.add_metric([], view["window"]["seconds"])
    yield window
    estimated = _gauge(
        "pigeon_estimated_figures",
        "How many of this scrape's figures are the planner's estimates (large tables).",
        [],
    )
    estimated.add_metric([], len(view["estimated"]))
    yield estimated


def _obligations(view: dict[str, Any]) -> Iterator[Metric]:
    owed = _gauge("pigeon_obligations", "Obligations by kind and status.", ["name", "status"])
    oldest = _gauge(
        "pigeon_obligation_oldest_owed_seconds",
        "Age of the oldest obligation still owed (pending, in progress or failed), by kind.",
        ["name"],
    )
    total = _gauge(
        "pigeon_obligations_owed",
        "Obligations still owed (pending, in progress, failed).",
        ["name"],
    )
    for name, counts in sorted(view["obligations"].items()):
        for status in OBLIGATION_STATES:
            owed.add_metric([name, status], counts[status])
        oldest.add_metric([name], counts["oldest_owed_age"] or 0.0)
        total.add_metric([name], counts["owed"])
    yield from (owed, oldest, total)


def _queues(view: dict[str, Any]) -> Iterator[Metric]:
    jobs = _gauge("pigeon_jobs", "Jobs by queue and state.", ["queue", "state"])
    age = _gauge(
        "pigeon_queue_oldest_ready_seconds",
        "Age of the oldest waiting (eligible-ready) job (0 when none waits).",
        ["queue"],
    )
    objective = _gauge(
        "pigeon_queue_freshness_objective_seconds", "Freshness objective.", ["queue"]
    )
    breach = _gauge("pigeon_queue_freshness_breach", "1 while the objective is missed.", ["queue"])
    backlog = _gauge(
        "pigeon_queue_backlog",
        "Ready + reserved (+ stuck) jobs: the autoscaling signal.",
        ["queue"],
    )
    budget = _gauge("pigeon_queue_workers_budget", "The queue's max workers.", ["queue"])
    attempts = _gauge(
        "pigeon_job_attempts_last_hour",
        "Attempts finished in the last hour, by outcome (succeeded / not).",
        ["queue", "outcome"],
    )
    service = _gauge(
        "pigeon_job_service_seconds",
        "Occupied time of the last hour's successful attempts, by quantile.",
        ["queue", "quantile"],
    )
    durations = GaugeHistogramMetricFamily(
        "pigeon_job_attempt_duration_seconds",
        "Durations of the last hour's successful attempts.",
        labels=["queue"],
    )
    for q in view["queues"]:
        name = q["queue"]
        for state in JOB_STATES:
            jobs.add_metric([name, state], q[state])
        age.add_metric([name], q["oldest_ready_age"] or 0.0)
        objective.add_metric([name], q["objective"])
        breach.add_metric([name], 1.0 if q["breach"] else 0.0)
        backlog.add_metric([name], q["backlog"])
        if q["workers"]["budget"] is not None:
            budget.add_metric([name], q["workers"]["budget"])
        hour = q["last_hour"]
        attempts.add_metric([name, "succeeded"], hour["succeeded"])
        attempts.add_metric([name, "failed"], hour["failed"])
        for point, seconds in hour["durations"].items():
            service.add_metric([name, f"0.{point[1:]}"], seconds)
        buckets = [(f"{b:g}", float(hour["histogram"][f"{b:g}"])) for b in DURATION_BUCKETS]
        buckets.append(("+Inf", float(hour["histogram"]["+Inf"])))
        durations.add_metric([name], buckets, hour["duration_sum"])
    yield from (jobs, age, objective, breach, backlog, budget, attempts, service, durations)


def _failed(view: dict[str, Any]) -> Iterator[Metric]:
    by_owner = _gauge("pigeon_failed_jobs", "Failed jobs awaiting review, by owner.", ["owner"])
    for owner, entry in sorted(view["failed_by_owner"].items()):
        by_owner.add_metric([owner], entry["failed"])
    yield by_owner
    by_class = _gauge(
        "pigeon_failed_jobs_by_class",
        "Failed jobs awaiting review, by owner, queue and error class.",
        ["owner", "queue", "error_class"],
    )
    for g in view["failed"]["groups"]:
        by_class.add_metric([g["owner"], g["queue"], g["error_class"]], g["count"])
    yield by_class


def _health(view: dict[str, Any]) -> Iterator[Metric]:
    relay = _gauge("pigeon_relay_pending", "Outbox rows not yet confirmed by the broker.", [])
    relay.add_metric([], view["relay"]["pending"])
    lag = _gauge(
        "pigeon_relay_lag_seconds", "Age of the oldest unpublished outbox row (0: none).", []
    )
    lag.add_metric([], view["relay"]["oldest_age"] or 0.0)
    orphans = _gauge(
        "pigeon_records_without_job",
        "Records or pending obligations in the window that no job will settle (must be 0).",
        [],
    )
    orphans.add_metric([], view["reconciliation"]["without_job"]["count"])
    yield from (relay, lag, orphans)


def _lifecycle(view: dict[str, Any]) -> Iterator[Metric]:
    # A counter: the database's count only grows (pigeon.lifecycle), on every node alike.
    events = CounterMetricFamily(
        "pigeon_lifecycle_events",
        "Lifecycle events, by kind: worker_recycled (a worker recycled by its supervisor), "
        "relay_lock_takeover (a relay took over the relay lock), serve_worker_replaced "
        "(a pigeon serve worker died and was replaced).",
        labels=["kind"],
    )
    for kind, entry in sorted(view["lifecycle"].items()):
        events.add_metric([kind], entry["count"])
    yield events


def _versions(view: dict[str, Any]) -> Iterator[Metric]:
    waiting = _gauge(
        "pigeon_jobs_waiting_newer_worker",
        "Due jobs of a payload version newer than any live worker of their queue runs, or "
        "of a task none of them knows, by task (a deploy half done, or a task removed with "
        "jobs left: they wait, never run wrongly nor failed).",
        ["queue", "task"],
    )
    for entry in view["versions"]["waiting"]:
        waiting.add_metric([entry["queue"], entry["task"]], entry["waiting"])
    live = _gauge("pigeon_workers_live", "Worker processes in the registry, renewed lately.", [])
    live.add_metric([], len(view["versions"]["workers"]))
    yield from (waiting, live)
