"""How long a command takes to start, beside a bare interpreter (``python -c pass``) in
the same run: ``import pigeon`` (the edge's names load on first use), ``pigeon --help``
(commands are imported when they run) and ``pigeon queue stats`` on a small queue file
(the edge alone: no server, no reference app), and ``pigeon serve`` on a new SQLite file
until its health probe answers 200 (the reference app built, the database made: what an
operator restarting a server, and every test that starts one, waits for).

Each command runs ``ROUNDS`` times as a new process, alternating with the bare
interpreter, after one untimed run of each (files in the page cache, bytecode compiled);
the median of each is reported, twice: wall time, and the CPU time (user + system) the
child used (for ``pigeon serve``: until it exits on the SIGTERM sent once it is ready).
On a shared machine the wall time grows with the load while the CPU time barely moves, so
the CPU rows are the ones to compare across days. Targets (issue 22): ``import pigeon``
within 0.2 s of the bare start, the two commands within 0.5 s; ``pigeon serve`` ready
within 1 s (this file's mark, not issue 22's).
"""

from __future__ import annotations

import functools
import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench._report import Row, row
from bench._servers import free_port

ROUNDS = 15
BARE = [sys.executable, "-c", "pass"]
# Every start but the first reads its bytecode, as a machine's every start does, even where
# this process was told not to write it (a bytecode-less start compiles pigeon anew).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
HEALTH = "/pigeon/v1/health"
READY_TIMEOUT = 30.0
# How long to wait between two probes of a server not yet ready: a short wait makes the
# reading exact to a few milliseconds without taking the child's CPU.
PROBE_INTERVAL = 0.005

# Starts one run as a new process; gives its wall and CPU seconds.
Start = Callable[[], tuple[float, float]]


def _start(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` as a new process."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
    if child.returncode != 0:
        raise RuntimeError(f"{argv} exited with {child.returncode}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def _healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        connection.request("GET", HEALTH)
        return connection.getresponse().status == 200
    except OSError:  # not listening yet, or the connection dropped
        return False
    finally:
        connection.close()


def _serve_ready(cli: list[str], folder: Path) -> tuple[float, float]:
    """Wall seconds until ``pigeon serve`` on a new SQLite file answers its health probe,
    and the CPU seconds it used until it exited on SIGTERM."""
    port = free_port()
    db = folder / f"serve-{port}-{time.monotonic_ns()}.db"
    argv = [*cli, "serve", "--db", str(db), "--port", str(port)]
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        while not _healthy(port):
            if child.poll() is not None:
                raise RuntimeError(f"{argv} exited with {child.returncode} before it was ready")
            if time.perf_counter() - started > READY_TIMEOUT:
                raise RuntimeError(f"{argv} not ready after {READY_TIMEOUT} s")
            time.sleep(PROBE_INTERVAL)
        wall = time.perf_counter() - started
    except BaseException:
        child.kill()
        child.wait()
        raise
    child.send_signal(signal.SIGTERM)  # as an operator stops it
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
    return wall, usage.ru_utime + usage.ru_stime


def _compare(name: str, argv: list[str], budget: float, rounds: int) -> list[Row]:
    return _compare_starts(name, functools.partial(_start, argv), budget, rounds)


def _compare_starts(name: str, start: Start, budget: float, rounds: int) -> list[Row]:
    bare_start = functools.partial(_start, BARE)
    # Files cached, bytecode compiled: as every start but the first.
    for warm in (bare_start, start):
        warm()
    bare, pigeon = [], []
    for _ in range(rounds):
        bare.append(bare_start())
        pigeon.append(start())
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
            *_compare_starts(
                "startup: pigeon serve until healthy",
                functools.partial(_serve_ready, cli, Path(tmp)),
                1.0,
                rounds,
            ),
        ]
