"""`pigeon bench` (DESIGN.md names it): the checkout's benchmarks, or a clear refusal."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests import processes

ROOT = Path(__file__).resolve().parents[2]
PIGEON = [sys.executable, "-m", "pigeon"]


def test_it_runs_the_checkouts_benchmarks(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    env = {**os.environ, "COLUMNS": "200"}
    result = processes.run(
        [*PIGEON, "bench", "--only", "no_such_bench", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "pigeon benchmarks" in result.stdout and json.loads(out.read_text()) == []


def test_outside_a_checkout_it_says_where_to_run_it(tmp_path: Path) -> None:
    result = processes.run(
        [*PIGEON, "bench", "--quick"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "no bench/ folder" in result.stderr
