"""The demo end to end: a real server process, the fault proxy, the queue and the engine."""

from __future__ import annotations

import sys
import uuid
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from pigeon.demo.run import run_demo
from tests import processes


def test_demo_reconciles_exactly_once_through_every_fault() -> None:
    report = run_demo(operations=240, notes=60, fault_rate=0.15, batch=5, seed=3, timeout=90)
    for kind in ("drop_request", "drop_response", "error", "delay", "duplicate"):
        assert report.faults[kind] > 0, f"no {kind} fault happened: the demo proved nothing"
    assert report.made == 240
    assert 0 < report.queued <= report.made
    assert report.delivered == report.queued
    assert report.effects == report.queued
    assert (report.duplicates, report.lost, report.dead) == (0, 0, 0)
    assert report.state_matches, report.mismatched_notes
    assert report.ok


def test_demo_command_exits_zero_and_prints_the_reconciliation() -> None:
    result = processes.run(
        [sys.executable, "-m", "pigeon", "demo", "--operations", "120", "--notes", "30"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reconciliation" in result.stdout
    assert "Every edit took effect exactly once" in result.stdout


def test_demo_command_with_requests_side_by_side() -> None:
    args = ["--operations", "150", "--notes", "40", "--batch", "0"]
    result = processes.run(
        [sys.executable, "-m", "pigeon", "demo", *args, "--concurrency", "8", "--pipeline", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Every edit took effect exactly once" in result.stdout


def test_the_verdict_requires_one_effect_per_queued_operation() -> None:
    from pigeon.demo.run import DemoReport

    clean = DemoReport(made=3, queued=2, delivered=2, effects=2, state_matches=True)
    assert clean.ok
    assert not replace(clean, effects=3).ok  # an extra effect, though the notes match
    assert not replace(clean, effects=1).ok
    assert not replace(clean, delivered=1).ok


def test_count_duplicates_counts_effects_under_keys_never_queued() -> None:
    from collections import Counter

    from pigeon.demo.run import count_duplicates

    assert count_duplicates(Counter({"a": 1, "b": 1}), {"a", "b"}) == 0
    assert count_duplicates(Counter({"a": 3, "b": 1}), {"a", "b"}) == 2
    assert count_duplicates(Counter({"a": 1, "stranger": 2}), {"a", "b"}) == 2


def test_reconcile_fails_an_extra_effect_under_a_new_key(tmp_path: Path) -> None:
    """The edit landed once through the queue, then once more under a freshly minted key
    (what a client that makes a new key per retry does): same notes, one effect too many."""
    from pigeon.demo.run import DEMO_TOKEN, DEMO_USER, DemoReport, _reconcile
    from pigeon.demo.session import Edit
    from pigeon.edge.queue import OfflineQueue
    from pigeon.protocol.http import HttpTransport
    from pigeon.sync.engine import SyncEngine
    from tests.processes import ServerProcess

    note = {"id": "x-1", "title": "T", "body": "b"}
    with ServerProcess(tmp_path / "server.db") as server:
        queue = OfflineQueue(tmp_path / "edge.db")
        transport = HttpTransport(server.url, token=DEMO_TOKEN)
        engine = SyncEngine(queue, transport)
        engine.enqueue("create", "note:x-1", note)
        assert engine.flush(timeout=10)
        engine.close()
        transport.close()
        again = httpx.put(
            server.url + "/notes/x-1",
            json=note,
            headers={"Idempotency-Key": str(uuid.uuid4()), **DEMO_USER},
        )
        assert again.status_code == 200
        report = DemoReport(made=1, queued=1)
        _reconcile(report, queue, server, [Edit("create", "note:x-1", note)])
        queue.close()
    assert report.state_matches and report.delivered == 1
    assert (report.effects, report.duplicates) == (2, 1)
    assert not report.ok


def test_operations_still_queued_at_the_timeout_are_pending_not_lost() -> None:
    from pigeon.edge.queue import OfflineQueue

    def hold(queue: OfflineQueue) -> None:
        queue.pause("held by the test")  # nothing more leaves: the timeout must run out

    report = run_demo(operations=40, notes=10, fault_rate=0.0, timeout=0.3, on_offline=hold)
    assert report.timed_out
    assert report.pending > 0 and report.pending + report.delivered == report.queued
    assert (report.lost, report.duplicates, report.dead) == (0, 0, 0)
    assert not report.ok


@pytest.mark.parametrize("timeout", [-1.0, float("nan")])
def test_run_demo_refuses_a_negative_or_nan_timeout(timeout: float) -> None:
    from pigeon.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="timeout"):
        run_demo(timeout=timeout)


@pytest.mark.parametrize("timeout", ["-1", "nan"])
def test_demo_command_refuses_a_negative_or_nan_timeout(timeout: str) -> None:
    from typer.testing import CliRunner

    from pigeon.cli import app

    result = CliRunner().invoke(app, ["demo", "--operations", "5", "--timeout", timeout])
    assert result.exit_code == 2, result.output
    assert "--timeout" in result.output


def test_the_demo_says_the_sync_timed_out_and_shows_pending_apart_from_lost() -> None:
    from rich.console import Console

    from pigeon.cli.demo_cmd import _reconciliation_table, verdict
    from pigeon.demo.run import DemoReport

    report = DemoReport(made=9, queued=8, delivered=5, effects=5, pending=3, timed_out=True)
    report.state_matches = False
    console = Console(record=True, width=200)
    console.print(_reconciliation_table(report))
    console.print(verdict(report, 2.5))
    text = console.export_text()
    assert "pending at timeout" in text and "The sync timed out after 2.5 s" in text
    assert "3 operation(s) still pending" in text and "(not lost)" in text
    rows = {cells[1].strip(): cells[2].strip() for cells in _cells(text)}
    assert (rows["lost"], rows["pending at timeout"]) == ("0", "3")


def _cells(table: str) -> list[list[str]]:
    return [line.split("│") for line in table.splitlines() if line.count("│") == 4]


@pytest.mark.parametrize("rate", ["0.4", "0.33", "0.26", "-0.1"])
def test_demo_command_refuses_a_fault_rate_it_cannot_finish_clean(rate: str) -> None:
    # 0.33 was accepted ("at most 1/3"): 99% of requests faulted, most operations ended in
    # the dead letters and the demo failed its own reconciliation.
    from typer.testing import CliRunner

    from pigeon.cli import app

    result = CliRunner().invoke(app, ["demo", "--operations", "5", "--fault-rate", rate])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.replace("│", " ").split())  # unwrap rich's error box
    assert f"'--fault-rate': {float(rate)} is not in the range 0.0<=x<=0.25" in text, text
