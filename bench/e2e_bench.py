"""End-to-end delivery over loopback, beside the floor, in one run.

pigeon: a queue (durability full) pre-filled with creates on distinct notes is drained by
the sync engine into a `pigeon serve` process (SQLite, durability full) — one operation
per request (one at a time, the default, and 16 on the wire: ``HttpTransport(concurrency=16)``,
which the server's group commit answers with one fsync for those that arrive together),
and batches of 10 and 100 (one batch at a time, the default, and 2 on the way:
``SyncOptions(pipeline=2)``). Rate = operations delivered per second of drain.

Two ceilings, measured in the same run: the same `pigeon serve` driven by a client that
does nothing but send requests built before the clock starts (new keys each, no queue,
no engine) — one operation per request, one at a time, and batches of 100, two on the
wire. The server's own work per operation is all that is left, so the engine in the
matching mode cannot beat these rows; the batches' row (one process) has a target of its
own, 15x the floor. The batches once more with `pigeon serve --workers
2` (two processes taking turns at the one SQLite file's write lock): what the second core
adds to one interpreter. And the raw limit under them: the same prebuilt
requests to an app that runs only the intake's own SQL per operation (claim, note, ledger
row, stored response, a savepoint each, one commit per request) straight on sqlite3
(bench/_raw_intake_app.py): the price of the storage the protocol asks for, with none of
pigeon's code around it; and the same batches written set-based (``set_app``: one call
each for the keys read, the notes, the ledger rows and the claims with their answers),
the ceiling of pigeon's set-based batches.

The floor: plain sequential httpx POSTs to a trivial Starlette endpoint in its own uvicorn
process, no idempotency and no storage; and the same endpoint doing one synchronous=FULL
SQLite insert per request.

Each rate, the floor's as well as every row's, is the best of ``REPEATS`` runs (each on
new files): a quiet spell of this shared machine flatters either side alike, as timeit's
best of its repeats does. The floor's runs are one before the rows and one after.

Every server here gets the same warm-up before its clock starts
(``bench._warm.WARM_REQUESTS`` requests of the kind it is timed on, over the connections
it is timed on): the floor's POSTs; pigeon's e2e cases a first delivery of that many
requests' worth of operations by the same engine and transport; the ceilings and raw
limits that many of their prebuilt requests, spread over their connections.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from bench._report import Row, rate, row
from bench._servers import BODY, floor_rate, process, timed_clients, uvicorn_app
from bench._warm import WARM_REQUESTS, warm_share
from pigeon.core.wire import HEALTH_PATH
from pigeon.demo.processes import ServerProcess
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.options import SyncOptions

REPEATS = 2  # runs of each rate, the best kept (see the module's note)


def _server_alone(
    tmp: Path,
    n: int,
    batch: int,
    streams: int,
    *,
    raw: bool = False,
    raw_app: str = "app",
    workers: int = 1,
) -> float:
    """Operations per second of `pigeon serve` fed prebuilt requests (``batch`` = 1: single
    POST /notes) over ``streams`` keep-alive connections, each one request at a time, by
    ``workers`` serving processes. ``raw``: the same requests to the intake's SQL alone
    (bench/_raw_intake_app.py)."""
    per, warm = max(n // streams // batch, 1), warm_share(streams)

    def op(key: str) -> dict[str, Any]:
        return {"id": key, **BODY}

    def requests(s: int) -> list[tuple[str, bytes, dict[str, str]]]:
        out = []
        for r in range(warm + per):
            keys = [f"c{s}-{r}-{j}" for j in range(batch)]
            if batch == 1:
                body = json.dumps(op(keys[0])).encode()
                out.append(("/notes", body, {"idempotency-key": keys[0]}))
            else:
                wire = [
                    {"idempotency_key": k, "method": "POST", "path": "/notes", "body": op(k)}
                    for k in keys
                ]
                out.append(("/pigeon/v1/batch", json.dumps({"operations": wire}).encode(), {}))
        return out

    planned = [requests(s) for s in range(streams)]

    def send(s: int, client: httpx.Client, first: int = warm, end: int = warm + per) -> int:
        ok = 0
        for path, body, headers in planned[s][first:end]:
            headers = {"content-type": "application/json", **headers}
            answer = client.post(path, content=body, headers=headers)
            ok += batch if answer.status_code in (200, 201) else 0
        return ok

    db = tmp / f"alone-{batch}-{streams}-{workers}.db"
    with _alone_server(db, raw=raw, raw_app=raw_app, workers=workers) as url:
        answered, elapsed = timed_clients(
            url, streams, send, warm=lambda s, client: send(s, client, 0, warm)
        )
    if answered != per * batch * streams:
        raise RuntimeError(f"server alone: {answered}/{per * batch * streams} answered")
    return rate(answered, elapsed)


@contextlib.contextmanager
def _alone_server(db: Path, *, raw: bool, raw_app: str = "app", workers: int = 1) -> Iterator[str]:
    if raw:
        app = uvicorn_app(f"bench._raw_intake_app:{raw_app}")
        with process(app, probe_path=HEALTH_PATH) as url:
            yield url
    else:
        extra = ["--workers", str(workers)] if workers > 1 else []
        with ServerProcess(db, allow_anonymous=True, extra_args=extra) as server:
            yield server.url


def _pigeon(
    tmp: Path, n: int, batch: int | bool, *, concurrency: int = 1, pipeline: int = 1
) -> float:
    name = f"{batch}-{concurrency}-{pipeline}"
    with ServerProcess(tmp / f"server-{name}.db", allow_anonymous=True) as server:
        queue = OfflineQueue(tmp / f"edge-{name}.db", QueueOptions(durability="full"))
        transport = HttpTransport(server.url, batch=batch, timeout=30.0, concurrency=concurrency)
        size = 100 if batch is False else int(batch)
        engine = SyncEngine(
            queue,
            transport,
            SyncOptions(cycle_size=size, pipeline=pipeline),
            connectivity=ManualMonitor(True),
        )
        # The same warm-up as the floor's: WARM_REQUESTS requests of this kind, untimed.
        warm = WARM_REQUESTS * (1 if batch is False else int(batch))
        for tag, count in (("w", warm), ("b", n)):
            with queue.batch():
                for i in range(count):
                    queue.enqueue("create", f"note:{tag}{i}", {"id": f"{tag}{i}", **BODY})
            if tag == "w" and not engine.drain(timeout=600):
                raise RuntimeError("the warm-up did not drain")
        started = time.perf_counter()
        drained = engine.drain(timeout=600)
        elapsed = time.perf_counter() - started
        delivered = queue.stats().delivered - warm
        transport.close()
        queue.close()
        if not drained or delivered != n:
            raise RuntimeError(f"drain incomplete: {delivered}/{n} delivered")
        return rate(n, elapsed)


def _times_floor(target: float | None, measured: float, floor: float) -> dict[str, Any]:
    """A row's target as a multiple of the floor (None: reported only) and its verdict."""
    if target is None:
        return {"target": "-", "ok": True}
    return {"target": f">= {target:g}x", "ok": measured >= target * floor}


def _best(tmp: Path, measure: Callable[[Path], float]) -> float:
    """The best of ``REPEATS`` runs of ``measure``, each in a new folder of ``tmp``: no
    key, note or queue of an earlier run is met again."""
    return max(measure(Path(tempfile.mkdtemp(dir=tmp))) for _ in range(REPEATS))


def run(*, quick: bool = False) -> list[Row]:
    n_floor = 1000 if quick else 3000
    n_single = 500 if quick else 2000
    n_batch = 2000 if quick else 10000
    # The floors are taken before and after the pigeon runs, their best kept.
    floors = [floor_rate("/plain", n_floor)]
    floors_sqlite = [floor_rate("/sqlite", n_floor)]
    with tempfile.TemporaryDirectory(prefix="pigeon-e2e-") as folder:
        tmp = Path(folder)
        cases = [  # label, target (x floor), rate
            ("1 op/request", 0.6, _best(tmp, lambda d: _pigeon(d, n_single, False))),
            ("1 op/request, 16 on the wire", 0.6,
             _best(tmp, lambda d: _pigeon(d, n_single, False, concurrency=16))),
            ("batches of 10", None, _best(tmp, lambda d: _pigeon(d, n_batch, 10))),
            ("batches of 100", 10.0, _best(tmp, lambda d: _pigeon(d, n_batch, 100))),
            ("batches of 100, 2 on the way", 10.0,
             _best(tmp, lambda d: _pigeon(d, n_batch, 100, pipeline=2))),
        ]  # fmt: skip
        ceilings = [  # label, target (x floor), rate
            ("1 op/request, one at a time", None,
             _best(tmp, lambda d: _server_alone(d, n_single, 1, 1))),
            ("batches of 100, 2 on the wire", 15.0,
             _best(tmp, lambda d: _server_alone(d, n_batch, 100, 2))),
            # What the machine's second core adds: `pigeon serve --workers 2` on one file.
            ("batches of 100, 2 on the wire, 2 serving processes", None,
             _best(tmp, lambda d: _server_alone(d, n_batch, 100, 2, workers=2))),
        ]  # fmt: skip
        raw_limits = [
            ("1 op/request, one at a time",
             _best(tmp, lambda d: _server_alone(d, n_single, 1, 1, raw=True))),
            ("batches of 100, 2 on the wire",
             _best(tmp, lambda d: _server_alone(d, n_batch, 100, 2, raw=True))),
            ("batches of 100, 2 on the wire, set-based",
             _best(tmp, lambda d: _server_alone(d, n_batch, 100, 2, raw=True, raw_app="set_app"))),
        ]  # fmt: skip
    floors.append(floor_rate("/plain", n_floor))
    floors_sqlite.append(floor_rate("/sqlite", n_floor))
    floor = max(floors)
    floor_name = "floor: plain httpx -> Starlette"
    rows: list[Row] = [
        row("floor + 1 SQLite insert/request", max(floors_sqlite), floor, unit="req/s",
            baseline_name=floor_name, target="-", ok=True),
    ]  # fmt: skip
    for label, target, measured in cases:
        rows.append(
            row(f"e2e delivered, {label}", measured, floor, unit="ops/s",
                baseline_name=floor_name, **_times_floor(target, measured, floor))
        )  # fmt: skip
    for label, target, measured in ceilings:
        rows.append(
            row(f"ceiling: server alone, prebuilt, {label}", measured, floor, unit="ops/s",
                baseline_name=floor_name, **_times_floor(target, measured, floor))
        )  # fmt: skip
    for label, measured in raw_limits:
        rows.append(
            row(f"raw limit: the intake's SQL alone, {label}", measured, floor, unit="ops/s",
                baseline_name=floor_name, target="-", ok=True)
        )  # fmt: skip
    return rows
