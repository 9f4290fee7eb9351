"""The end-to-end demo: edit notes in a tunnel, reconnect through a faulty network, reconcile.

1. a real `pigeon serve` process on loopback, a fault proxy in front of it, switched offline;
2. an editing session goes into a durable queue: a quarter online, half in a tunnel (where
   coalescing folds redundant edits), a quarter while the queue drains;
3. the network is back, with dropped requests, responses dropped after the server
   committed, 5xx, delays and duplicated requests; the sync engine delivers;
4. the server's effect ledger and notes are read back and checked against the session:
   every operation took effect once, nothing was lost, the notes are what the user wrote.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from pigeon.core.operation import OpStatus
from pigeon.core.retry import RetryPolicy
from pigeon.demo.processes import ServerProcess
from pigeon.demo.session import Edit, expected_state, offline_session
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import ConfigurationError
from pigeon.protocol.http import HttpTransport
from pigeon.reference.faultproxy import FaultPlan, FaultProxy
from pigeon.reference.notes_reads import LEDGER_PATH
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions

# Fast retries: the demo's faults are frequent and the network is loopback.
DEMO_RETRY = RetryPolicy(base=0.02, factor=2.0, cap=0.5, max_attempts=60)
# The demo user's bearer token for `pigeon serve --auth demo` (the stand-in reads the
# principal before the first dot and verifies nothing: loopback only).
DEMO_TOKEN = "demo-user.offline-session"
DEMO_USER = {"Authorization": f"Bearer {DEMO_TOKEN}"}


@dataclass
class DemoReport:
    made: int = 0
    queued: int = 0  # operations stored after coalescing
    delivered: int = 0
    effects: int = 0  # rows in the server's effect ledger
    # Ledger rows beyond the first for one queued operation's key, plus every row whose key
    # is no queued operation's: an effect the session never asked for is one too many.
    duplicates: int = 0
    # Queued operations neither still in the queue (live or dead) nor applied on the
    # server: delivered without an effect, or gone from the queue file altogether.
    lost: int = 0
    # Live operations (pending, in flight, conflict-held) when the sync stopped: still
    # durably queued and sent with their keys on the next sync, so not lost, but not done.
    pending: int = 0
    timed_out: bool = False  # the queue had not drained when the timeout ran out
    dead: int = 0
    conflicts: int = 0
    state_matches: bool = False
    seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    mismatched_notes: list[str] = field(default_factory=list)

    @property
    def coalesced_away(self) -> int:
        return self.made - self.queued

    @property
    def ok(self) -> bool:
        # Counted, not only compared as notes: an extra effect that happens to leave the
        # same note text behind (a replayed update) must still fail the verdict.
        exactly_once = self.delivered == self.queued == self.effects
        return (
            exactly_once
            and self.duplicates == 0
            and self.lost == 0
            and self.pending == 0
            and not self.timed_out
            and self.dead == 0
            and self.state_matches
        )


Progress = Callable[[int, int], None]  # (delivered so far, total to deliver)


def run_demo(
    *,
    operations: int = 400,
    notes: int = 120,
    fault_rate: float = 0.1,
    batch: int = 10,
    seed: int = 7,
    timeout: float = 120.0,
    concurrency: int = 1,
    pipeline: int = 1,
    workdir: Path | None = None,
    on_offline: Callable[[OfflineQueue], None] | None = None,
    progress: Progress | None = None,
) -> DemoReport:
    if not timeout >= 0:  # also refuses nan, which every comparison lets through
        raise ConfigurationError(f"timeout={timeout} must be a number of seconds >= 0")
    plan = FaultPlan.uniform(fault_rate, max_delay=0.05, seed=seed)  # refused before starting
    report = DemoReport()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pigeon-demo-") as tmp:
        base = workdir or Path(tmp)
        with ServerProcess(base / "server.db") as server:
            with FaultProxy(server.url, plan) as proxy:
                queue = OfflineQueue(base / "edge.db", QueueOptions(retry_policy=DEMO_RETRY))
                transport = HttpTransport(
                    proxy.url,
                    batch=batch or False,
                    timeout=5.0,
                    concurrency=concurrency,
                    token=DEMO_TOKEN,
                )
                engine = SyncEngine(
                    queue,
                    transport,
                    SyncOptions(pipeline=pipeline),
                    connectivity=ManualMonitor(False),
                )
                try:
                    edits = offline_session(operations, notes, seed=seed)
                    first, second = len(edits) // 4, (3 * len(edits)) // 4
                    # On the platform: online, but the network is flaky already.
                    proxy.set_offline(False)
                    engine.set_online(True)
                    engine.start()
                    _edit(engine, edits[:first], pace=0.01)
                    # In the tunnel: nothing gets through; edits pile up and coalesce.
                    proxy.set_offline(True)
                    engine.set_online(False)
                    _edit(engine, edits[first:second])
                    if on_offline is not None:
                        on_offline(queue)
                    # Out of the tunnel: the queue drains while the user keeps typing.
                    proxy.set_offline(False)
                    engine.set_online(True)
                    _edit(engine, edits[second:], pace=0.01)
                    report.made = len(edits)
                    report.queued = report.made - queue.stats().coalesced
                    drained = _wait_delivered(queue, report.queued, timeout, progress)
                    report.timed_out = not drained
                    report.faults = Counter(proxy.counts)
                finally:
                    engine.stop()
                    transport.close()
            _reconcile(report, queue, server, edits)
            queue.close()
    report.seconds = time.monotonic() - started
    return report


def _edit(engine: SyncEngine, edits: list[Edit], pace: float = 0.0) -> None:
    for edit in edits:
        note_id = edit.entity.split(":", 1)[1]
        # The note's id travels in the body: a create is POST /notes, and a create that
        # absorbed later updates must still name the note it creates.
        payload = {"id": note_id, **edit.payload} if edit.type != "delete" else {}
        engine.enqueue(edit.type, edit.entity, payload)
        if pace:
            time.sleep(pace)  # a person types; the engine sends meanwhile


def _wait_delivered(
    queue: OfflineQueue, total: int, timeout: float, progress: Progress | None
) -> bool:
    """Wait until nothing is live in the queue; False if ``timeout`` ran out first."""
    deadline = time.monotonic() + timeout
    while True:
        stats = queue.stats()
        if progress is not None:
            progress(stats.delivered, total)
        if stats.depth == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _reconcile(
    report: DemoReport, queue: OfflineQueue, server: ServerProcess, edits: list[Edit]
) -> None:
    url = server.url
    stats = queue.stats()
    report.delivered = stats.delivered
    report.dead = stats.dead
    report.conflicts = stats.conflicts
    # The ledger is the operator's to read; the notes are the demo user's.
    ledger: list[dict[str, Any]] = httpx.get(
        url + LEDGER_PATH, params={"limit": 10**7}, headers=server.operator_headers, timeout=10
    ).json()["entries"]
    stored = queue.operations(limit=10**7)  # every status: live, delivered, dead
    queued_keys = {op.idempotency_key for op in stored}
    keys = Counter(row["idempotency_key"] for row in ledger)
    report.effects = len(ledger)
    report.duplicates = count_duplicates(keys, queued_keys)
    report.pending = stats.depth
    delivered = [op for op in stored if op.status is OpStatus.DELIVERED]
    # Lost: said delivered but never applied, or missing from the file. Live operations
    # are pending, not lost (they are still queued with their keys); dead letters are
    # counted on their own.
    unapplied = sum(op.idempotency_key not in keys for op in delivered)
    report.lost = unapplied + max(report.queued - len(stored), 0)
    server_notes = {
        n["id"]: {"title": n["data"]["title"], "body": n["data"]["body"]}
        for n in httpx.get(url + "/notes", headers=DEMO_USER, timeout=10).json()["notes"]
    }
    wanted = expected_state(edits)
    report.mismatched_notes = sorted(
        k for k in wanted.keys() | server_notes.keys() if wanted.get(k) != server_notes.get(k)
    )
    report.state_matches = not report.mismatched_notes


def count_duplicates(applied: Counter[str], queued_keys: set[str]) -> int:
    """Effects beyond one per queued operation: repeats of a queued key, and every effect
    under a key the queue never held (e.g. a resend under a freshly minted key)."""
    return sum(n - 1 if key in queued_keys else n for key, n in applied.items())
