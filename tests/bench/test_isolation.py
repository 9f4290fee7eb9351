"""`python -m bench` runs each benchmark module in an interpreter of its own."""

from __future__ import annotations

import os

from bench.__main__ import isolated


def test_each_module_runs_in_a_process_of_its_own() -> None:
    first = isolated("tests.bench.pid_bench")
    second = isolated("tests.bench.pid_bench")
    pids = {first[0]["pigeon"], second[0]["pigeon"]}
    assert len(pids) == 2 and os.getpid() not in pids
    assert first[0]["baseline"] == second[0]["baseline"] == 1  # nothing ran there before
