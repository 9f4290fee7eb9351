"""Resident memory of ``pigeon serve`` under hostile and maximal batches, and the health
probe's latency throughout (issue 14): its idle figure; while it refuses 16 MiB batches
of empty objects (millions of entries, refused at the 1,001st); while it takes batches
of the maximum size in a row (1,000 operations filling the 16 MiB batch limit: 16 KiB
notes). Target: growth under 64 MiB over idle, and every probe answered within 100 ms.

A prober process asks ``/pigeon/v1/health`` every 20 ms on its own connection and reads
the server's resident set (psutil) at each probe. ``python -m bench --only memory``
(``--quick``: 10 maximal batches instead of 100).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import httpx
import psutil

from bench._report import Row, row
from bench._servers import free_port, wait_until_up
from pigeon.core.wire import BATCH_PATH, HEALTH_PATH, MAX_BATCH
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY

GROWTH_TARGET_MIB = 64.0
PROBE_TARGET_MS = 100.0


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def _probe(url: str, pid: int, control: Connection) -> None:
    """The prober process (its own interpreter: the bench building 16 MiB bodies must
    not delay its probes): probe and sample until told "stop", per phase the worst."""
    phase = "idle"
    peak_rss: dict[str, float] = {}
    worst_ms: dict[str, float] = {}
    took_ms: dict[str, list[float]] = {}
    failures = 0
    ready = False
    with httpx.Client(base_url=url, timeout=10) as client:
        while True:
            if ready and control.poll(0.02):
                phase = control.recv()
                if phase == "stop":
                    break
            started = time.perf_counter()
            try:
                ok = client.get(HEALTH_PATH).status_code == 200
            except httpx.HTTPError:
                ok = False
            took = (time.perf_counter() - started) * 1000
            failures += not ok
            peak_rss[phase] = max(peak_rss.get(phase, 0.0), rss_mib(pid))
            worst_ms[phase] = max(worst_ms.get(phase, 0.0), took)
            took_ms.setdefault(phase, []).append(took)
            if not ready:  # the idle phase has its first sample: the bench may go on
                control.send("ready")
                ready = True
    spread = {
        phase: (statistics.median(values), sorted(values)[int(len(values) * 0.99)], len(values))
        for phase, values in took_ms.items()
    }
    control.send((peak_rss, worst_ms, spread, failures))


class Prober:
    """Runs ``_probe`` in a process of its own; ``phase`` names what is measured now."""

    def __init__(self, url: str, pid: int) -> None:
        self._control, theirs = multiprocessing.get_context("spawn").Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_probe, args=(url, pid, theirs), daemon=True
        )
        self.peak_rss: dict[str, float] = {}
        self.worst_ms: dict[str, float] = {}
        self.spread: dict[str, tuple[float, float, int]] = {}  # median, p99, probes
        self.failures = 0

    def __enter__(self) -> Prober:
        self._process.start()
        if self._control.recv() != "ready":
            raise RuntimeError("the prober did not start")
        return self

    @property
    def phase(self) -> str:
        raise AttributeError("write-only")

    @phase.setter
    def phase(self, name: str) -> None:
        self._control.send(name)

    def __exit__(self, *exc: object) -> None:
        self._control.send("stop")
        self.peak_rss, self.worst_ms, self.spread, self.failures = self._control.recv()
        self._process.join(10)


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pigeon",
            "serve",
            "--db",
            str(folder / "server.db"),
            "--port",
            str(port),
            "--durability",
            "normal",
            "--allow-anonymous",  # the benchmark's requests carry no token
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url + HEALTH_PATH)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def empty_objects_batch() -> bytes:
    """As close to the 16 MiB limit as it goes: ~5.6 million empty operations."""
    count = (DEFAULT_MAX_BATCH_BODY - 32) // 3
    return b'{"operations":[' + b",".join([b"{}"] * count) + b"]}"


def maximal_batch(n: int, note_bytes: int) -> bytes:
    text = "x" * note_bytes
    ops = [
        {
            "id": f"op-{n}-{i}",
            "idempotency_key": f"max-{n}-{i}",
            "method": "POST",
            "path": "/notes",
            "body": {"id": f"n{n}-{i}", "text": text},
        }
        for i in range(MAX_BATCH)
    ]
    return json.dumps({"operations": ops}, separators=(",", ":")).encode()


def note_bytes_for_limit() -> int:
    """The note size that fills the batch limit with MAX_BATCH operations (less 1%)."""
    overhead = len(maximal_batch(999, 0))
    return int((DEFAULT_MAX_BATCH_BODY * 0.99 - overhead) // MAX_BATCH)


def run(quick: bool = False) -> list[Row]:
    batches = 10 if quick else 100
    hostile = empty_objects_batch()
    note_bytes = note_bytes_for_limit()
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as (url, pid):
        client = httpx.Client(
            base_url=url, timeout=120, headers={"Content-Type": "application/json"}
        )
        client.post(BATCH_PATH, json={"operations": []})  # warm: imports, first connection
        with Prober(url, pid) as prober:
            time.sleep(2.0)
            prober.phase = "hostile"
            refused = [client.post(BATCH_PATH, content=hostile) for _ in range(3)]
            assert all(r.status_code == 400 for r in refused), refused[0].text[:300]
            hostile_seconds = refused[-1].elapsed.total_seconds()
            prober.phase = "maximal"
            started = time.perf_counter()
            for n in range(batches):
                body = maximal_batch(n, note_bytes)
                reply = client.post(BATCH_PATH, content=body)
                assert reply.status_code == 200, reply.text[:300]
                statuses = {r["status"] for r in reply.json()["results"]}
                assert statuses == {201}, statuses
            maximal_seconds = time.perf_counter() - started
            prober.phase = "after"
            time.sleep(1.0)
        client.close()
    idle = prober.peak_rss["idle"]
    rows = []
    for phase, what in (
        ("hostile", f"refusing 16 MiB batches of {len(hostile) // 3:,} empty objects (x3)"),
        ("maximal", f"{batches} batches of {MAX_BATCH} ops x {note_bytes} B notes (~16 MiB)"),
    ):
        growth = prober.peak_rss[phase] - idle
        rows.append(
            row(
                f"serve RSS growth {what}",
                growth,
                GROWTH_TARGET_MIB,
                unit="MiB",
                baseline_name=f"target; idle RSS {idle:.1f} MiB",
                target=f"< {GROWTH_TARGET_MIB:.0f} MiB",
                ok=growth < GROWTH_TARGET_MIB,
                higher_is_better=False,
            )
        )
        worst = prober.worst_ms[phase]
        rows.append(
            row(
                f"health probe worst latency, {phase} phase",
                worst,
                PROBE_TARGET_MS,
                unit="ms",
                baseline_name="target",
                target=f"<= {PROBE_TARGET_MS:.0f} ms",
                ok=worst <= PROBE_TARGET_MS and prober.failures == 0,
                higher_is_better=False,
            )
        )
    print(
        f"memory bench: idle {idle:.1f} MiB, hostile peak {prober.peak_rss['hostile']:.1f} MiB "
        f"(last refusal {hostile_seconds:.2f} s), maximal peak {prober.peak_rss['maximal']:.1f} "
        f"MiB ({batches} batches in {maximal_seconds:.1f} s), probe failures {prober.failures}; "
        + "; ".join(
            f"{phase} probes: median {med:.1f} ms, p99 {p99:.1f} ms, n={n}"
            for phase, (med, p99, n) in prober.spread.items()
        ),
        file=sys.stderr,
    )
    return rows
