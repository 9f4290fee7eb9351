"""The edge queue's figures for Prometheus: a collector over ``OfflineQueue.stats()``.

An app that runs an edge queue in a long-lived process (a kiosk, a gateway, a sensor hub)
exports what the queue holds the way the server exports its ``/metrics``::

    from pigeon.ops.edge_metrics import serve_edge_metrics
    server = serve_edge_metrics(queue, port=9464)   # http://host:9464/metrics
    ...
    server.close()

or ``pigeon queue stats --file q.db --metrics-port 9464`` beside an app that does not.
Each scrape reads the queue once (``stats()``: one snapshot, so the figures agree with each
other); nothing is cached between scrapes. Only the queue's public API is used.

Names (label ``queue``: the name given, by default the file's name):

- ``pigeon_edge_depth``: live operations (pending + in flight + conflict-held);
- ``pigeon_edge_oldest_age_seconds``: age of the oldest live head (0 when the queue is empty);
- ``pigeon_edge_in_flight``, ``pigeon_edge_dead``, ``pigeon_edge_conflicts``: operations
  being sent, dead-lettered, held for conflict resolution;
- ``pigeon_edge_held``: operations held behind their entity's dead letter (not sent until
  it is retried or discarded);
- ``pigeon_edge_entities_blocked``: entities whose head is dead, conflict-held or backing
  off;
- ``pigeon_edge_delivered``: delivered operations still kept (``keep_delivered``), a gauge:
  the queue purges them, so it can fall;
- ``pigeon_edge_coalesced_total``: sends saved by coalescing since the file was made;
- ``pigeon_edge_paused``: 1 while sending is paused (``reason`` label: why), else 0;
- ``pigeon_edge_scrape_errors_total``: scrapes whose read of the queue failed (the figures
  of such a scrape are left out, never invented).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pigeon import OfflineQueue, QueueStats  # the queue's public API, nothing of its insides
from pigeon.checks import is_int_in
from pigeon.exceptions import ConfigurationError

log = logging.getLogger(__name__)

# (name, help, the figure of a QueueStats): the plain gauges, in the order they are exported.
GAUGES: tuple[tuple[str, str, Callable[[QueueStats], float]], ...] = (
    (
        "pigeon_edge_depth",
        "Live operations: pending, in flight and conflict-held.",
        lambda s: s.depth,
    ),
    (
        "pigeon_edge_oldest_age_seconds",
        "Age of the oldest live head (the next operation of its entity); 0 when empty.",
        lambda s: s.oldest_age or 0.0,
    ),
    ("pigeon_edge_in_flight", "Operations being sent.", lambda s: s.in_flight),
    ("pigeon_edge_dead", "Dead-lettered operations awaiting retry or discard.", lambda s: s.dead),
    ("pigeon_edge_conflicts", "Operations held for conflict resolution.", lambda s: s.conflicts),
    (
        "pigeon_edge_held",
        "Operations held behind their entity's dead letter until it is retried or discarded.",
        lambda s: s.held,
    ),
    (
        "pigeon_edge_entities_blocked",
        "Entities whose head is dead, conflict-held or backing off.",
        lambda s: s.entities_blocked,
    ),
    (
        "pigeon_edge_delivered",
        "Delivered operations still kept (purged after keep_delivered).",
        lambda s: s.delivered,
    ),
)
METRIC_NAMES = (
    *(name for name, _, _ in GAUGES),
    "pigeon_edge_coalesced_total",
    "pigeon_edge_paused",
    "pigeon_edge_scrape_errors_total",
)


class EdgeQueueCollector:
    """A prometheus_client collector: ``stats()`` of the queue at each scrape.

    ``stats`` is any callable returning a ``QueueStats`` (``queue.stats``), so a process
    may export a queue it reaches some other way; ``name`` labels every sample."""

    def __init__(self, stats: Callable[[], QueueStats], name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"the queue's metrics label must be a non-empty string, not {name!r}"
            )
        self.stats = stats
        self.name = name
        self.errors = 0
        self._lock = threading.Lock()  # scrapes may overlap (one thread per request)

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.stats()
        except Exception:  # a scrape must answer: the error is counted and logged
            log.exception("edge metrics: reading the queue %s failed", self.name)
            with self._lock:
                self.errors += 1
            stats = None
        labels = [self.name]
        if stats is not None:
            for metric, doc, figure in GAUGES:
                gauge = GaugeMetricFamily(metric, doc, labels=["queue"])
                gauge.add_metric(labels, float(figure(stats)))
                yield gauge
            coalesced = CounterMetricFamily(
                "pigeon_edge_coalesced",
                "Sends saved by coalescing since the queue file was made.",
                labels=["queue"],
            )
            coalesced.add_metric(labels, float(stats.coalesced))
            yield coalesced
            paused = GaugeMetricFamily(
                "pigeon_edge_paused",
                "1 while sending is paused (reason: why, e.g. authorisation needed), else 0.",
                labels=["queue", "reason"],
            )
            paused.add_metric([self.name, stats.paused or ""], 0.0 if stats.paused is None else 1.0)
            yield paused
        errors = CounterMetricFamily(
            "pigeon_edge_scrape_errors",
            "Scrapes whose read of the queue failed (their figures left out).",
            labels=["queue"],
        )
        errors.add_metric(labels, float(self.errors))
        yield errors


@dataclass
class EdgeMetricsServer:
    """The HTTP server ``serve_edge_metrics`` started: ``port`` is the one bound (useful
    with port 0); ``close()`` stops it and frees the port."""

    server: WSGIServer
    thread: threading.Thread
    registry: CollectorRegistry

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def __enter__(self) -> EdgeMetricsServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def serve_edge_metrics(
    queue: OfflineQueue,
    port: int,
    *,
    addr: str = "127.0.0.1",
    name: str | None = None,
) -> EdgeMetricsServer:
    """Serve ``queue``'s figures at ``http://addr:port/metrics`` from a daemon thread
    (prometheus_client's ``start_http_server``), in a registry of their own: nothing else
    of the process is exported. ``addr`` is loopback unless told otherwise (the figures
    name no payload, but a queue's depth is still the app's business). ``name``: the
    ``queue`` label (default: the queue file's name)."""
    if not is_int_in(port, 0, 65535):
        raise ConfigurationError(
            f"the metrics port must be an integer from 0 to 65535, not {port!r}"
        )
    label = name if name is not None else os.path.basename(queue.path)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EdgeQueueCollector(queue.stats, label))
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return EdgeMetricsServer(server, thread, registry)
