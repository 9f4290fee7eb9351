"""Start a server in its own process on a free loopback port, for benchmarks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg

from bench._report import rate
from bench._warm import WARM_REQUESTS

# What starts a server process: ``subprocess.Popen``, or a test's recording helper.
Spawn = Callable[..., "subprocess.Popen[Any]"]
# The body of every note the HTTP benchmarks send, to pigeon and to the floor alike.
BODY = {"title": "shopping list", "body": "milk, eggs, bread, coffee"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_up(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"server at {url} did not come up")


@contextlib.contextmanager
def process(
    args: list[str], probe_path: str = "/", spawn: Spawn = subprocess.Popen
) -> Iterator[str]:
    """Run `args` (which must accept a trailing --port) and yield its base URL."""
    port = free_port()
    proc = spawn([*args, "--port", str(port)], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url + probe_path)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def uvicorn_app(app: str) -> list[str]:
    return [sys.executable, "-m", "uvicorn", app, "--log-level", "warning", "--no-access-log"]


def floor_rate(path: str, n: int, spawn: Spawn = subprocess.Popen) -> float:
    """Requests per second of plain sequential httpx POSTs to ``path`` of the floor app
    (bench/_floor_app.py) in its own uvicorn process, after WARM_REQUESTS untimed."""
    app = uvicorn_app("bench._floor_app:app")
    with process(app, "/none", spawn) as url, httpx.Client(base_url=url) as client:
        for i in range(WARM_REQUESTS):
            client.post(path, json={"id": i, **BODY})
        started = time.perf_counter()
        for i in range(n):
            client.post(path, json={"id": i, **BODY})
        return rate(n, time.perf_counter() - started)


def timed_clients(
    url: str,
    streams: int,
    work: Callable[[int, httpx.Client], int],
    warm: Callable[[int, httpx.Client], object] = lambda s, client: None,
) -> tuple[int, float]:
    """``streams`` threads, each with its own keep-alive client: ``warm(s, client)`` before
    the clock starts (connect, first request), then ``work(s, client)``. Returns the sum of
    what the works returned and the seconds from the common start to the last one done."""
    done, seconds, _ = metered_clients(url, streams, work, warm)
    return done, seconds


def metered_clients(
    url: str,
    streams: int,
    work: Callable[[int, httpx.Client], int],
    warm: Callable[[int, httpx.Client], object] = lambda s, client: None,
    meter: Callable[[], float] = lambda: 0.0,
) -> tuple[int, float, float]:
    """``timed_clients``, and how far ``meter`` moved over the same timed part."""
    done = [0] * streams
    barrier = threading.Barrier(streams + 1)

    def run(s: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            warm(s, client)
            barrier.wait()
            done[s] = work(s, client)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(streams)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started, metered = time.perf_counter(), meter()
    for thread in threads:
        thread.join()
    return sum(done), time.perf_counter() - started, meter() - metered


ADMIN_DSN = os.environ.get("PIGEON_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextmanager
def pg_database() -> Iterator[str]:
    """A new PostgreSQL database on the server PIGEON_BENCH_PG_DSN names (default: the
    local one), its URL; dropped afterwards."""
    name = f"pigeon_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    info["dbname"] = name
    try:
        yield "postgresql://{user}@{host}:{port}/{dbname}".format(
            user=info.get("user", "postgres"),
            host=info.get("host", "127.0.0.1"),
            port=info.get("port", 5432),
            dbname=name,
        )
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
