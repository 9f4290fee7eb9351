"""The machine's condition, measured at the start of every ``python -m bench`` run and
printed above its table: this shared machine's speed moves by 3x from day to day, and a
ratio is read against the disk and the loopback of the run it came from.

- raw sqlite3: one INSERT per commit, WAL, synchronous=FULL (the edge bench's raw
  baseline, ``bench._writers.RawInserts``), inserts per second: the disk's fsync rate;
- the floor: plain sequential httpx POSTs to a trivial Starlette endpoint in its own
  uvicorn process (``bench._servers.floor_rate``, the e2e bench's floor), requests per
  second: the CPU and the loopback;
- the load average (1, 5, 15 minutes) when the run started, and the CPU count.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench._report import rate
from bench._servers import Spawn, floor_rate
from bench._warm import WARM_REQUESTS
from bench._writers import RawInserts


@dataclass(frozen=True)
class Condition:
    sqlite_inserts: float  # per second, one per commit, synchronous=FULL
    floor_requests: float  # per second, httpx -> Starlette
    load: tuple[float, float, float]
    cpus: int

    def markdown(self) -> str:
        """One line to print (and paste) above the table it belongs to."""
        one, five, fifteen = self.load
        return (
            f"**Machine condition** (start of this run): raw sqlite3 "
            f"{self.sqlite_inserts:,.0f} inserts/s (one per commit, synchronous=FULL); "
            f"floor {self.floor_requests:,.0f} req/s (plain httpx -> Starlette); "
            f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {self.cpus} CPUs."
        )


def measure(inserts: int = 200, requests: int = 500, spawn: Spawn = subprocess.Popen) -> Condition:
    """A few seconds: ``inserts`` raw inserts and ``requests`` floor requests, each after
    the same untimed warm-up the benchmarks give them."""
    load = os.getloadavg()  # before this measurement adds its own
    with tempfile.TemporaryDirectory(prefix="pigeon-condition-") as tmp:
        raw = RawInserts(Path(tmp) / "raw.db")
        try:
            raw.step(WARM_REQUESTS)
            sqlite = rate(inserts, raw.step(inserts))
        finally:
            raw.close()
    floor = floor_rate("/plain", requests, spawn)
    return Condition(sqlite, floor, load, os.cpu_count() or 1)
