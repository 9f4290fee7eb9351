"""The 9 a.m. dashboard and the metrics: what was received, what is still owed, who owns
what failed, and whether each queue keeps its freshness objective.

``GET /pigeon/v1/dashboard`` answers in JSON; ``GET /metrics`` in Prometheus exposition.
Both read the database when asked: the metrics come from a custom collector evaluated at
scrape time (no counters kept in process memory, so every intake process and node
reports the same truth from the shared database).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from pigeon.jobs._db import reading
from pigeon.jobs.app import App
from pigeon.jobs.stats import failed_by_owner, percentiles, queue_stats, service_times
from pigeon.server import access
from pigeon.storage.base import Database

DASHBOARD_PATH = "/pigeon/v1/dashboard"
METRICS_PATH = "/metrics"


def dashboard(db: Database, app: App | None = None, *, now: float | None = None) -> dict[str, Any]:
    """The dashboard's numbers, read in a few short read transactions."""
    now = time.time() if now is None else now
    with reading(db) as tx:
        records = {r["status"]: int(r["n"]) for r in tx.fetchall("rec_counts", {})}
        obligation_rows = tx.fetchall("obl_counts", {})
    obligations: dict[str, dict[str, int]] = {}
    for row in obligation_rows:
        counts = obligations.setdefault(
            row["name"], {"pending": 0, "completed": 0, "failed": 0, "cancelled": 0}
        )
        counts[row["status"]] = counts.get(row["status"], 0) + int(row["n"])
    queues = []
    for stats in queue_stats(db, app, now=now):
        entry = stats.as_dict()
        entry["service_time"] = percentiles(service_times(db, stats.queue))
        queues.append(entry)
    return {
        "at": now,
        "records": {
            "received": sum(records.values()),
            "completed": records.get("completed", 0),
            "open": sum(n for status, n in records.items() if status != "completed"),
        },
        "obligations": obligations,
        "queues": queues,
        "failed_by_owner": failed_by_owner(db),
    }


class JobsCollector:
    """A prometheus_client collector that reads the database at each scrape."""

    def __init__(self, source: Callable[[], dict[str, Any]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        view = self.source()
        records = GaugeMetricFamily(
            "pigeon_records", "Records accepted, by status.", labels=["status"]
        )
        records.add_metric(["received"], view["records"]["received"])
        records.add_metric(["completed"], view["records"]["completed"])
        yield records
        owed = GaugeMetricFamily(
            "pigeon_obligations", "Obligations by name and status.", labels=["name", "status"]
        )
        for name, counts in sorted(view["obligations"].items()):
            for status, n in sorted(counts.items()):
                owed.add_metric([name, status], n)
        yield owed
        jobs = GaugeMetricFamily(
            "pigeon_jobs", "Jobs by queue and state.", labels=["queue", "state"]
        )
        age = GaugeMetricFamily(
            "pigeon_queue_oldest_ready_seconds",
            "Age of the oldest eligible-ready job (0 when none is ready).",
            labels=["queue"],
        )
        objective = GaugeMetricFamily(
            "pigeon_queue_freshness_objective_seconds", "Freshness objective.", labels=["queue"]
        )
        breach = GaugeMetricFamily(
            "pigeon_queue_freshness_breach", "1 while the objective is missed.", labels=["queue"]
        )
        service = GaugeMetricFamily(
            "pigeon_job_service_seconds",
            "Occupied time of recent successful attempts, by quantile.",
            labels=["queue", "quantile"],
        )
        for q in view["queues"]:
            name = q["queue"]
            for state in ("ready", "delayed", "reserved", "stuck", "failed"):
                jobs.add_metric([name, state], q[state])
            age.add_metric([name], q["oldest_ready_age"] or 0.0)
            objective.add_metric([name], q["objective"])
            breach.add_metric([name], 1.0 if q["breach"] else 0.0)
            for point, seconds in q["service_time"].items():
                service.add_metric([name, f"0.{point[1:]}"], seconds)
        yield from (jobs, age, objective, breach, service)
        failed = GaugeMetricFamily(
            "pigeon_failed_jobs", "Failed jobs awaiting review, by owner.", labels=["owner"]
        )
        for owner, entry in sorted(view["failed_by_owner"].items()):
            failed.add_metric([owner], entry["failed"])
        yield failed


def dashboard_routes(db: Database, app: App | None = None) -> list[BaseRoute]:
    """Both routes, read-only and keyless, for operators alone (`pigeon.server.access`):
    the failed jobs name records and errors, the counts are the business's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobsCollector(lambda: dashboard(db, app)))

    async def get_dashboard(request: Request) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(dashboard, db, app))

    async def get_metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return [
        access.operator(
            Route(DASHBOARD_PATH, get_dashboard, methods=["GET"], name="pigeon_dashboard")
        ),
        access.operator(Route(METRICS_PATH, get_metrics, methods=["GET"], name="pigeon_metrics")),
    ]
