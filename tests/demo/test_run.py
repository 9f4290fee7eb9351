"""The demo end to end: a real server process, the fault proxy, the queue and the engine."""

from __future__ import annotations

import subprocess
import sys

from pigeon.demo.run import run_demo


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
    result = subprocess.run(
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
    result = subprocess.run(
        [sys.executable, "-m", "pigeon", "demo", *args, "--concurrency", "8", "--pipeline", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Every edit took effect exactly once" in result.stdout
