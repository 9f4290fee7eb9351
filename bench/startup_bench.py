"""How long a command takes to start, beside a bare interpreter (``python -c pass``) in
the same run: ``import pigeon`` (the edge's names load on first use), ``pigeon --help``
(commands are imported when they run) and ``pigeon queue stats`` on a small queue file
(the edge alone: no server, no reference app).

Each command runs ``ROUNDS`` times as a new process, alternating with the bare
interpreter, after one untimed run of each (files in the page cache, bytecode compiled);
the median of each is reported, twice: wall time, and the CPU time (user + system) the
child used. On a shared machine the wall time grows with the load while the
CPU time barely moves, so the CPU rows are the ones to compare across days. Targets
(issue 22): ``import pigeon`` within 0.2 s of the bare start, the two commands within 0.5 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._report import Row, row

ROUNDS = 15
BARE = [sys.executable, "-c", "pass"]


def _start(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` as a new process."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
    if child.returncode != 0:
        raise RuntimeError(f"{argv} exited with {child.returncode}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def _compare(name: str, argv: list[str], budget: float, rounds: int) -> list[Row]:
    for warm in (BARE, argv):  # files cached, bytecode compiled: as every start but the first
        _start(warm)
    bare, pigeon = [], []
    for _ in range(rounds):
        bare.append(_start(BARE))
        pigeon.append(_start(argv))
    rows = []
    for i, kind in ((0, "wall"), (1, "CPU")):
        b = statistics.median(run[i] for run in bare)
        p = statistics.median(run[i] for run in pigeon)
        rows.append(
            row(
                f"{name} ({kind})",
                p * 1000,
                b * 1000,
                unit="ms",
                baseline_name="python -c pass",
                target=f"<= +{budget * 1000:.0f} ms",
                ok=p - b <= budget,
                higher_is_better=False,
            )
        )
    return rows


def run(quick: bool = False) -> list[Row]:
    from pigeon.edge.queue import OfflineQueue

    rounds = 5 if quick else ROUNDS
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.db"
        queue = OfflineQueue(path)
        queue.enqueue("create", "note:1", {"id": "1"})
        queue.close()
        cli = [sys.executable, "-m", "pigeon"]
        return [
            *_compare(
                "startup: import pigeon", [sys.executable, "-c", "import pigeon"], 0.2, rounds
            ),
            *_compare("startup: pigeon --help", [*cli, "--help"], 0.5, rounds),
            *_compare(
                "startup: pigeon queue stats",
                [*cli, "queue", "stats", "-f", str(path)],
                0.5,
                rounds,
            ),
        ]
