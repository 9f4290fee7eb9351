"""How long a command takes to start, beside a bare interpreter (``python -c pass``) in
the same run: ``import pigeon`` (the edge's names load on first use), ``pigeon --help``
(commands are imported when they run) and ``pigeon queue stats`` on a small queue file
(the edge alone: no server, no reference app).

Each command runs ``ROUNDS`` times as a new process, alternating with the bare
interpreter; the median wall time of each is reported. Targets (issue 22): ``import
pigeon`` within 0.2 s of the bare start, the two commands within 0.5 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._report import Row, row

ROUNDS = 15
BARE = [sys.executable, "-c", "pass"]


def _wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _compare(name: str, argv: list[str], budget: float, rounds: int) -> Row:
    _wall(argv)  # bytecode compiled and files cached, as on every start but the first
    bare, pigeon = [], []
    for _ in range(rounds):
        bare.append(_wall(BARE))
        pigeon.append(_wall(argv))
    b, p = statistics.median(bare), statistics.median(pigeon)
    return row(
        name,
        p * 1000,
        b * 1000,
        unit="ms",
        baseline_name="python -c pass",
        target=f"<= +{budget * 1000:.0f} ms",
        ok=p - b <= budget,
        higher_is_better=False,
    )


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
            _compare(
                "startup: import pigeon", [sys.executable, "-c", "import pigeon"], 0.2, rounds
            ),
            _compare("startup: pigeon --help", [*cli, "--help"], 0.5, rounds),
            _compare(
                "startup: pigeon queue stats",
                [*cli, "queue", "stats", "-f", str(path)],
                0.5,
                rounds,
            ),
        ]
