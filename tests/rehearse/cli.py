"""``pigeon rehearse`` as a user runs it: a process of its own, its JSON report read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import processes

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests.rehearse.mutants imports


def rehearse(
    tmp_path: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run ``pigeon rehearse ARGS --report FILE`` in the checkout (``env`` added to this
    process's environment); its result and report."""
    report = tmp_path / "report.json"
    done = processes.run(
        [sys.executable, "-m", "pigeon", "rehearse", *args, "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=os.environ | (env or {}),
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return done, data


def scenario(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in report["scenarios"] if s["name"] == name)
    return found


def failures(report: dict[str, Any] | None) -> str:
    """The failed scenarios' problems, for an assertion's message."""
    if report is None:
        return "no report"
    failed = [s for s in report["scenarios"] if s["outcome"] == "failed"]
    return "; ".join(f"{s['name']}: {s['problems']}" for s in failed)
