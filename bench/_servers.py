"""Start a server in its own process on a free loopback port, for benchmarks."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import httpx


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
def process(args: list[str], probe_path: str = "/") -> Iterator[str]:
    """Run `args` (which must accept a trailing --port) and yield its base URL."""
    port = free_port()
    proc = subprocess.Popen([*args, "--port", str(port)], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url + probe_path)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def uvicorn_app(app: str) -> list[str]:
    return [sys.executable, "-m", "uvicorn", app, "--log-level", "warning", "--no-access-log"]


def timed_clients(
    url: str,
    streams: int,
    work: Callable[[int, httpx.Client], int],
    warm: Callable[[int, httpx.Client], object] = lambda s, client: None,
) -> tuple[int, float]:
    """``streams`` threads, each with its own keep-alive client: ``warm(s, client)`` before
    the clock starts (connect, first request), then ``work(s, client)``. Returns the sum of
    what the works returned and the seconds from the common start to the last one done."""
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
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return sum(done), time.perf_counter() - started
