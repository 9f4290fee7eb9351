"""Intake throughput of the reference app on PostgreSQL vs SQLite, side by side, how it
scales with intake processes on PostgreSQL, and its round trips on the wire.

The same `pigeon serve --workers 2` (two uvicorn processes, inline claims) on a fresh
PostgreSQL database and on a SQLite file (synchronous=FULL), driven by 8 client threads
each with its own keep-alive connection: single-operation POST /notes with a new key
each, then batches of 20 and of 100 through POST /pigeon/v1/batch. Rate = operations
answered 201 per second. Both servers run side by side and each row's requests go to
them in alternated turns (A B, B A, ...): a slow minute of this shared machine falls on
both, where one block after the other put it on one. Batches of 100 on PostgreSQL have a
target (at least SQLite's figure in the same run): a batch costs PostgreSQL a bounded
number of round trips, not some per operation. Single operations and batches of 20 are
reported.

Scaling: `--workers 4` against `--workers 1` on one PostgreSQL database, batches of 100,
the two servers up together and driven in turns as above, beside the machine's CPU count
(client threads and PostgreSQL share those CPUs).

Round trips: one request of each kind through a relay in front of PostgreSQL that counts
the server's turns (``bench/_pg_wire.py``): one POST /notes at most two plus the COMMIT's,
a batch a number that does not grow with its size (10 and 100 side by side).

PostgreSQL is the one named by PIGEON_BENCH_PG_DSN (default: the local server).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from bench import _pg_wire
from bench._report import Row, rate, row
from bench._servers import pg_database, timed_clients
from pigeon.demo.processes import ServerProcess

THREADS = 8
BATCH = 20
LARGE = 100
TURNS = 4  # each server's share of a row, in alternated turns
SINGLE_BOUND = 3  # round trips of one POST /notes: two, and the COMMIT's
Send = Callable[[httpx.Client, str, int], int]


def _single(client: httpx.Client, tag: str, i: int) -> int:
    key = f"{tag}-{i}"
    body = {"id": key, "title": "shopping list", "body": "milk, eggs"}
    response = client.post("/notes", json=body, headers={"Idempotency-Key": key})
    return 1 if response.status_code == 201 else 0


def _batch(size: int) -> Send:
    def send(client: httpx.Client, tag: str, i: int) -> int:
        ops = [
            {
                "idempotency_key": f"{tag}-{i}-{j}",
                "method": "POST",
                "path": "/notes",
                "body": {"id": f"{tag}-{i}-{j}", "title": "shopping list", "body": "milk"},
            }
            for j in range(size)
        ]
        response = client.post("/pigeon/v1/batch", json={"operations": ops})
        if response.status_code != 200:
            return 0
        return sum(r["status"] == 201 for r in response.json()["results"])

    return send


def _drive(url: str, requests: int, send: Send) -> tuple[int, float]:
    """``requests`` requests over THREADS connections: the operations that succeeded, and
    the seconds they took."""
    tags = [f"t{t}-{uuid.uuid4().hex[:6]}" for t in range(THREADS)]

    def warm(t: int, http: httpx.Client) -> None:  # connect before the clock
        send(http, f"warm{t}-{uuid.uuid4().hex[:6]}", 0)

    def work(t: int, http: httpx.Client) -> int:
        return sum(send(http, tags[t], i) for i in range(requests // THREADS))

    return timed_clients(url, THREADS, work, warm)


def _alternated(urls: Sequence[str], requests: int, send: Send) -> list[float]:
    """Each server's rate over ``requests`` requests of ``send``, sent in TURNS turns each,
    the servers' order reversed every other turn."""
    done, spent = [0] * len(urls), [0.0] * len(urls)
    share = max(THREADS, requests // TURNS)
    for turn in range(TURNS):
        order = range(len(urls)) if turn % 2 == 0 else reversed(range(len(urls)))
        for i in order:
            ops, took = _drive(urls[i], share, send)
            done[i] += ops
            spent[i] += took
    return [rate(ops, took) for ops, took in zip(done, spent, strict=True)]


@contextmanager
def _servers(*dbs: tuple[str, int]) -> Iterator[list[str]]:
    """A `pigeon serve --workers N` on each (database, N), up together; their URLs."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                ServerProcess(db, extra_args=["--workers", str(n)], allow_anonymous=True)
            ).url
            for db, n in dbs
        ]


def _side_by_side(singles: int, batches: int, large: int) -> list[Row]:
    plan = [(singles, _single), (batches, _batch(BATCH)), (large, _batch(LARGE))]
    with (
        tempfile.TemporaryDirectory(prefix="pigeon-intake-") as tmp,
        pg_database() as url,
        _servers((str(Path(tmp) / "server.db"), 2), (url, 2)) as urls,
    ):
        rates = [_alternated(urls, requests, send) for requests, send in plan]
    lite, pg = [r[0] for r in rates], [r[1] for r in rates]
    base = "SQLite, same 2 uvicorn processes"
    return [
        row("intake on PostgreSQL, 2 procs, 1 op/request", pg[0], lite[0],
            unit="ops/s", baseline_name=base, target="report", ok=True),
        row(f"intake on PostgreSQL, 2 procs, batches of {BATCH}", pg[1], lite[1],
            unit="ops/s", baseline_name=base, target="report", ok=True),
        row(f"intake on PostgreSQL, 2 procs, batches of {LARGE}", pg[2], lite[2],
            unit="ops/s", baseline_name=base, target=">= 1.0x", ok=pg[2] >= lite[2]),
    ]  # fmt: skip


def _scaling(large: int) -> Row:
    cpus = os.cpu_count() or 1
    with pg_database() as url, _servers((url, 1), (url, 4)) as urls:
        one, four = _alternated(urls, large, _batch(LARGE))
    # The wish (>= 2.5x) needs the CPUs to run four processes, their clients and the server.
    wished = four >= 2.5 * one
    return row(
        f"intake on PostgreSQL, 4 procs vs 1, batches of {LARGE}, on {cpus} CPUs",
        four,
        one,
        unit="ops/s",
        baseline_name="1 process, same database",
        target=">= 2.5x (on >= 4 CPUs; report below)",
        ok=wished or cpus < 4,
    )


def _wire() -> list[Row]:
    kinds = {
        "single": _pg_wire.single,
        "ten": _pg_wire.batch(10),
        "large": _pg_wire.batch(LARGE),
    }
    with pg_database() as url:
        counts = _pg_wire.round_trips(url, kinds)
    single, ten, large = counts["single"], counts["ten"], counts["large"]
    return [
        row("round trips on the wire, 1 POST /notes (PostgreSQL)", single.turns, SINGLE_BOUND,
            unit="round trips", baseline_name="the bound: 2 and the COMMIT's",
            target="<= 3", ok=single.turns <= SINGLE_BOUND, higher_is_better=False),
        row(f"round trips on the wire, a batch of {LARGE} vs of 10 (PostgreSQL)", large.turns,
            ten.turns, unit="round trips", baseline_name="a batch of 10",
            target="same (bounded)", ok=large.turns <= ten.turns, higher_is_better=False),
    ]  # fmt: skip


def run(*, quick: bool = False) -> list[Row]:
    singles, batches, large = (800, 80, 24) if quick else (4000, 400, 160)
    return [*_side_by_side(singles, batches, large), _scaling(large), *_wire()]


if __name__ == "__main__":
    for r in run(quick=True):
        print(r)
