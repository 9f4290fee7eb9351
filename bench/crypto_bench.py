"""What encryption at rest costs, each path with a key beside the same path without one,
interleaved in one run (``pigeon.storage.crypto``). Durability "normal" on purpose: with
an fsync per commit the disk hides the CPU cost this measures.

* edge enqueue, 1 thread: ``OfflineQueue(keys=...)`` vs ``OfflineQueue()``;
* edge delivery cycle: ``next_batch(100)`` + ``mark_delivered_many`` (payloads opened,
  responses sealed);
* server intake, one ``POST /notes`` per transaction (the note and the stored response
  sealed) and batches of 100, in process on SQLite: ``open_server_db(keyring=...)`` vs none.

Each pair runs interleaved, step by step, after one untimed round of the same steps for
both (``bench._warm.interleaved``), so the first use of a statement, an import or a cache
is paid by neither. Timed in CPU seconds of this process (``time.process_time``): all of
it runs in this one thread, and on a shared machine wall time mostly measures the
neighbours.

Target: a key costs at most 25% of the throughput on these CPU-bound paths. Without a key
the code path is the one the other benchmarks measure (compare them with main's).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench._report import Row, rate, row
from bench._warm import interleaved
from bench._writers import PAYLOAD
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.reference.notes import create_note
from pigeon.reference.schema import attach
from pigeon.server.intake import Intake, OperationRequest
from pigeon.storage.base import Database
from pigeon.storage.crypto import Keyring, generate_key
from pigeon.storage.server import open_server_db

KEYS = Keyring((("bench", generate_key()),))
ROUNDS = 30


class _Enqueue:
    def __init__(self, path: Path, keys: Keyring | None) -> None:
        self.queue = OfflineQueue(path, QueueOptions(durability="normal"), keys=keys)
        self.i = 0

    def step(self, k: int) -> float:
        started = time.process_time()
        for _ in range(k):
            self.i += 1
            self.queue.enqueue("update", f"note:{self.i}", PAYLOAD)
        return time.process_time() - started

    def close(self) -> None:
        self.queue.close()


class _Deliver:
    """Fills ``k`` operations untimed, then times handing them out and settling them."""

    def __init__(self, path: Path, keys: Keyring | None) -> None:
        options = QueueOptions(durability="normal", keep_delivered=None)
        self.queue = OfflineQueue(path, options, keys=keys)
        self.i = 0

    def step(self, k: int) -> float:
        with self.queue.batch():
            for _ in range(k):
                self.i += 1
                self.queue.enqueue("create", f"note:{self.i}", PAYLOAD)
        started = time.process_time()
        left = k
        while left > 0:
            ops = self.queue.next_batch(100)
            self.queue.mark_delivered_many([(op.id, {"ok": op.payload}, '"1"') for op in ops])
            left -= len(ops)
        return time.process_time() - started

    def close(self) -> None:
        self.queue.close()


class _Intake:
    def __init__(self, path: Path, keys: Keyring | None, batch: int) -> None:
        self.db: Database = open_server_db(path, durability="normal", keyring=keys)
        attach(self.db)  # the reference app's tables, which create_note writes
        self.intake = Intake(self.db)
        self.intake.add_operation("POST", "/notes", create_note)
        self.batch = batch

    def _op(self) -> OperationRequest:
        key = str(uuid.uuid4())
        return OperationRequest("POST", "/notes", {"id": key, **PAYLOAD}, key, key)

    def step(self, k: int) -> float:
        started = time.process_time()
        if self.batch == 1:
            for _ in range(k):
                assert self.intake.execute("p", self._op()).status == 201
        else:
            for _ in range(k // self.batch):
                self.intake.execute_batch("p", [self._op() for _ in range(self.batch)])
        return time.process_time() - started

    def close(self) -> None:
        self.db.close()


Factory = Callable[[Path, Keyring | None], "_Enqueue | _Deliver | _Intake"]


def _pair(folder: Path, name: str, factory: Factory, k: int) -> tuple[float, float]:
    """(with a key, without) in operations per second, interleaved step by step."""
    keyed, plain = factory(folder / f"{name}-key.db", KEYS), factory(folder / f"{name}.db", None)
    try:
        spent = interleaved((keyed, plain), (k, k), ROUNDS)
    finally:
        keyed.close()
        plain.close()
    return rate(ROUNDS * k, spent[0]), rate(ROUNDS * k, spent[1])


def run(*, quick: bool = False) -> list[Row]:
    scale = 1 if quick else 4
    cases: list[tuple[str, Factory, int]] = [
        ("enqueue, 1 thread, normal", _Enqueue, 100 * scale),
        ("delivery cycle (next_batch 100 + settle)", _Deliver, 200 * scale),
        ("intake POST /notes, 1 per transaction", lambda p, key: _Intake(p, key, 1), 50 * scale),
        ("intake POST /notes, batches of 100", lambda p, key: _Intake(p, key, 100), 100 * scale),
    ]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="pigeon-bench-") as tmp:
        for name, factory, k in cases:
            keyed, plain = _pair(Path(tmp), f"case{len(rows)}", factory, k)
            rows.append(
                row(f"sealed at rest: {name}", keyed, plain, unit="ops/s",
                    baseline_name="same, no key", target=">= 0.75x", ok=keyed >= 0.75 * plain)
            )  # fmt: skip
    return rows
