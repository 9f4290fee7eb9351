"""``@pigeon.idempotent`` on a FastAPI + SQLAlchemy handler that inserts one row, against
the same handler without pigeon: same PostgreSQL database, same uvicorn, same run.

Both routes live in one app on a real uvicorn over loopback, driven by the same httpx
clients (four threads); the rounds alternate, so drift in the machine's load falls on
both. Round trips and statements per request are counted on the wire, on one more
request of each through a relay in front of PostgreSQL (tests/pgwire.py), with the
connection already open: every turn the driver takes and every statement PostgreSQL
runs, BEGIN and COMMIT included. PostgreSQL is the one named by PIGEON_BENCH_PG_DSN
(default: the local server).
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import httpx
from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel
from sqlalchemy import Engine, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from tests.pgwire import Counts, RoundTrips

from bench._report import Row, rate, row, timed
from bench._servers import pg_database
from pigeon.demo.processes import serve_in_thread
from pigeon.integrations.fastapi import Pigeon
from pigeon.integrations.fastapi.migrations import migrate_tables

THREADS = 4


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "bench_items"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100))


class ItemIn(BaseModel):
    name: str


def session(request: Request) -> Any:
    with Session(request.app.state.engine) as s:
        yield s


Db = Annotated[Session, Depends(session)]
pigeon = Pigeon()


def _app(engine: Engine) -> FastAPI:
    app = FastAPI()
    app.state.engine = engine

    @app.post("/bare", status_code=201)
    def bare(item: ItemIn, db: Db) -> dict[str, Any]:
        row_ = Item(name=item.name)
        db.add(row_)
        db.flush()
        answer = {"id": row_.id, "name": item.name}
        db.commit()  # as pigeon does: after the answer is made, no refresh after it
        return answer

    @app.post("/pigeon", status_code=201)
    @pigeon.idempotent
    def guarded(item: ItemIn, db: Db) -> dict[str, Any]:
        row_ = Item(name=item.name)
        db.add(row_)
        db.flush()
        return {"id": row_.id, "name": item.name}

    return app


def _round(url: str, path: str, n: int, keys: itertools.count[int]) -> float:
    def send(_: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            for _ in range(n // THREADS):
                key = f"k{next(keys)}"
                answer = client.post(path, json={"name": "x"}, headers={"Idempotency-Key": key})
                assert answer.status_code == 201, answer.text

    with ThreadPoolExecutor(THREADS) as pool:
        return timed(lambda: list(pool.map(send, range(THREADS))))


def _on_the_wire(engine: Engine) -> dict[str, Counts]:
    """Round trips and statements of one request of each route, on its own engine whose
    connections go through the counting relay (opened by a first request of each)."""
    url = engine.url
    relay = RoundTrips((url.host or "127.0.0.1", url.port or 5432))
    relayed = create_engine(url.set(host="127.0.0.1", port=relay.port), pool_size=1)
    counts: dict[str, Counts] = {}
    try:
        with serve_in_thread(_app(relayed)) as base, httpx.Client(base_url=base) as client:
            for path in ("/bare", "/pigeon"):
                for attempt in ("warm", "count"):
                    key = {"Idempotency-Key": f"wire-{attempt}-{path}"}
                    with relay.counting() as counted:
                        answer = client.post(path, json={"name": "x"}, headers=key)
                    assert answer.status_code == 201, answer.text
                counts[path] = counted
        return counts
    finally:
        relayed.dispose()
        relay.close()


def run(*, quick: bool = False) -> list[Row]:
    n, rounds = (200, 2) if quick else (1000, 3)
    with pg_database() as pg:
        engine = create_engine(
            "postgresql+psycopg://" + pg.removeprefix("postgresql://"), pool_size=THREADS * 2
        )
        Base.metadata.create_all(engine)
        with engine.begin() as conn:
            migrate_tables(conn)
        keys = itertools.count()
        with serve_in_thread(_app(engine)) as url:
            _round(url, "/bare", 40, keys), _round(url, "/pigeon", 40, keys)  # warm both
            bare = guarded = 0.0
            for _ in range(rounds):
                bare += _round(url, "/bare", n, keys)
                guarded += _round(url, "/pigeon", n, keys)
        wire = _on_the_wire(engine)
        engine.dispose()
    ours, theirs = rate(n * rounds, guarded), rate(n * rounds, bare)
    return [
        row(
            "FastAPI+SQLAlchemy insert, @idempotent vs bare (PostgreSQL, 4 clients)",
            ours,
            theirs,
            unit="req/s",
            baseline_name="same handler, no pigeon",
            target=">= 0.7x",
            ok=ours >= 0.7 * theirs,
        ),
        row(
            "round trips per request on the wire, @idempotent vs bare (PostgreSQL)",
            wire["/pigeon"].turns,
            wire["/bare"].turns,
            unit="round trips",
            baseline_name="same handler, no pigeon",
            target="at most 1 more",
            ok=wire["/pigeon"].turns <= wire["/bare"].turns + 1,
            higher_is_better=False,
        ),
        row(
            "statements per request on the wire, @idempotent vs bare (PostgreSQL)",
            wire["/pigeon"].statements,
            wire["/bare"].statements,
            unit="statements",
            baseline_name="same handler, no pigeon",
            target="report",
            ok=True,
            higher_is_better=False,
        ),
    ]
