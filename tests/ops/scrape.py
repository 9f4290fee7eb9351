"""``/metrics`` as a scrape sees it, read by the real collector (`pigeon.ops.metrics`)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from pigeon.ops.metrics import OpsCollector
from pigeon.ops.queries import overview
from pigeon.storage.base import Database


def metrics_text(db: Database) -> str:
    """The exposition text ``/metrics`` answers for ``db`` (as pigeon.ops.dashboard makes it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpsCollector(lambda: overview(db, history=False)))
    return generate_latest(registry).decode()


def lifecycle_counts(text: str) -> dict[str, float]:
    """``pigeon_lifecycle_events_total`` by ``kind``, from exposition text."""
    return {
        sample.labels["kind"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "pigeon_lifecycle_events_total"
    }
