"""The edge queue's figures for Prometheus (`pigeon.ops.edge_metrics`): the real HTTP
endpoint is scraped with httpx and every value equals the queue's own ``stats()``, from a
function in the app's process and from ``pigeon queue stats --metrics-port`` beside it."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pigeon import OfflineQueue, QueueStats
from pigeon.exceptions import ConfigurationError
from pigeon.ops.edge_metrics import METRIC_NAMES, serve_edge_metrics
from tests import processes

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[OfflineQueue]:
    """A queue holding one of everything: delivered, dead, held behind the dead one,
    conflict-held, in flight, pending, one send saved by coalescing, and paused."""
    with OfflineQueue(tmp_path / "edge.db") as q:
        ops = {e: q.enqueue("create", f"note:{e}", {"e": e}).id for e in "abcde"}
        q.enqueue("update", "note:a", {"e": "a2"})  # folded into a's create: coalesced
        sent = {op.id for op in q.next_batch(4)}
        assert sent == {ops[e] for e in "abcd"}
        q.mark_delivered(ops["a"])
        q.mark_failed(ops["b"], "422: refused", kind="permanent")
        q.mark_failed(ops["c"], "412: changed meanwhile", kind="conflict")
        q.enqueue("update", "note:b", {"e": "b2"})  # held behind b, the dead letter
        q.pause("authorisation needed")
        yield q


def scrape(url: str) -> dict[str, tuple[dict[str, str], float]]:
    reply = httpx.get(url, timeout=10)
    assert reply.status_code == 200, reply.text
    return {
        s.name: (s.labels, s.value)
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
        if s.name.startswith("pigeon_edge_")
    }


def check(
    samples: dict[str, tuple[dict[str, str], float]],
    before: QueueStats,
    after: QueueStats,
    name: str,
) -> None:
    assert set(samples) == set(METRIC_NAMES)
    assert all(labels["queue"] == name for labels, _ in samples.values())
    value = {metric: v for metric, (_, v) in samples.items()}
    # Everything but the age is the same before and after the scrape; the age in between.
    assert before == dataclasses.replace(after, oldest_age=before.oldest_age)
    # b2 held behind dead b, c conflict-held, d in flight, e pending
    assert value["pigeon_edge_depth"] == before.depth == 4
    assert value["pigeon_edge_held"] == before.held == 1
    assert value["pigeon_edge_in_flight"] == before.in_flight == 1
    assert value["pigeon_edge_dead"] == before.dead == 1
    assert value["pigeon_edge_conflicts"] == before.conflicts == 1
    assert value["pigeon_edge_entities_blocked"] == before.entities_blocked == 2  # b and c
    assert value["pigeon_edge_delivered"] == before.delivered == 1
    assert value["pigeon_edge_coalesced_total"] == before.coalesced == 1
    assert before.oldest_age is not None and after.oldest_age is not None
    assert before.oldest_age <= value["pigeon_edge_oldest_age_seconds"] <= after.oldest_age
    labels, paused = samples["pigeon_edge_paused"]
    assert paused == 1 and labels["reason"] == before.paused == "authorisation needed"
    assert value["pigeon_edge_scrape_errors_total"] == 0


def test_the_served_figures_are_the_queues_stats(queue: OfflineQueue) -> None:
    with serve_edge_metrics(queue, 0, name="kiosk") as server:
        before = queue.stats()
        samples = scrape(f"http://127.0.0.1:{server.port}/metrics")
        after = queue.stats()
        check(samples, before, after, "kiosk")
        queue.resume()  # read at each scrape: nothing is cached
        labels, paused = scrape(f"http://127.0.0.1:{server.port}/metrics")["pigeon_edge_paused"]
        assert paused == 0 and labels["reason"] == ""
    with pytest.raises(httpx.ConnectError):  # closed: the port is free again
        httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=2)


def test_a_failed_read_is_counted_not_invented(queue: OfflineQueue) -> None:
    with serve_edge_metrics(queue, 0) as server:
        queue.close()  # every later read fails
        samples = scrape(f"http://127.0.0.1:{server.port}/metrics")
    assert set(samples) == {"pigeon_edge_scrape_errors_total"}
    labels, errors = samples["pigeon_edge_scrape_errors_total"]
    assert errors == 1 and labels["queue"] == "edge.db"


@pytest.mark.parametrize("port", [-1, 65536, "9000", True])
def test_a_bad_port_is_refused_by_name(queue: OfflineQueue, port: object) -> None:
    with pytest.raises(ConfigurationError, match="metrics port"):
        serve_edge_metrics(queue, port)  # type: ignore[arg-type]


def test_pigeon_queue_stats_serves_them_beside_the_app(queue: OfflineQueue) -> None:
    """The app keeps its queue open; the CLI opens the same file and serves its figures."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "pigeon", "queue", "stats", "--file", queue.path]
    proc = processes.spawn(
        [*command, "--metrics-port", "0"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("metrics: http://127.0.0.1:"), line
        before = queue.stats()
        samples = scrape(line.split(" ", 1)[1].strip())
        after = queue.stats()
        check(samples, before, after, "edge.db")
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: stops serving, exits cleanly
        assert proc.wait(30) == 0  # room for a loaded machine; a hang still fails


def test_ctrl_c_right_after_the_port_line_stops_serving_cleanly(queue: OfflineQueue) -> None:
    # The port's line comes before the figures' table: a supervisor (or a test) that
    # stops the command as soon as it has read it must get a clean exit, not 130.
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "pigeon", "queue", "stats", "--file", queue.path]
    proc = processes.spawn(
        [*command, "--metrics-port", "0"], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("metrics: http://127.0.0.1:")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
