"""``pigeon serve``'s listening sockets (`pigeon.cli.listeners`): one worker serves on the
socket bound first; under ``--workers N`` on Linux each worker on a socket of its own in a
SO_REUSEPORT group, so the kernel spreads a client's connections over all of them."""

from __future__ import annotations

import collections
import contextlib
import functools
import pickle
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import typer
from uvicorn.config import STARTUP_FAILURE

from pigeon.cli.listeners import SPREADS_CONNECTIONS, listen_socket, own_socket, worker_sockets
from pigeon.core.wire import HEALTH_PATH
from tests.cli.test_serve_cmd import _children, refused
from tests.processes import ServerProcess
from tests.waiting import wait_for

CONNECTIONS = 32
# Spread by a hash of each connection's addresses over two sockets, fewer than this many
# of 32 on one of them has a chance of about 5 in a million.
FAIR_SHARE = 4

spreading = pytest.mark.skipif(not SPREADS_CONNECTIONS, reason="the kernel spreads on Linux")


@contextlib.contextmanager
def _bound() -> Iterator[socket.socket]:
    sock = listen_socket("127.0.0.1", 0)
    with contextlib.closing(sock):
        yield sock


def test_one_worker_serves_on_the_socket_bound_first() -> None:
    with _bound() as sock:
        assert worker_sockets(sock, 1) == [sock]


@spreading
def test_each_worker_is_handed_a_socket_of_its_own_and_connections_reach_all() -> None:
    with _bound() as sock, contextlib.ExitStack() as stack:
        port = sock.getsockname()[1]
        handed = worker_sockets(sock, 2)
        assert list(handed) == []  # nothing for the supervisor itself to listen on
        # What two workers receive: uvicorn pickles what it hands each one it starts.
        ours = [pickle.loads(pickle.dumps(handed))[0] for _ in range(2)]
        for own in ours:
            stack.enter_context(contextlib.closing(own))
            assert own.getsockname()[1] == port and own.proto == socket.IPPROTO_TCP
            own.listen(CONNECTIONS)
            own.setblocking(False)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNECTIONS)]
        for client in clients:
            stack.enter_context(contextlib.closing(client))
        accepted = [0, 0]
        for i, own in enumerate(ours):
            while True:
                try:
                    conn, _ = own.accept()
                except BlockingIOError:
                    break
                conn.close()
                accepted[i] += 1
        assert sum(accepted) == CONNECTIONS and min(accepted) >= FAIR_SHARE, accepted
        # The address stays refused to any other server (bound without SO_REUSEPORT).
        with pytest.raises(typer.BadParameter, match="cannot listen on"):
            listen_socket("127.0.0.1", port)


@spreading
def test_a_worker_that_cannot_join_the_group_stops_its_supervisor() -> None:
    """Its own socket is made as the worker starts: refused (here, by a listener without
    SO_REUSEPORT), it exits with the code on which uvicorn's supervisor gives up."""
    with _bound() as taken:
        taken.listen()
        with pytest.raises(SystemExit) as stopped:
            own_socket("127.0.0.1", taken.getsockname()[1])
    assert stopped.value.code == STARTUP_FAILURE


def _by_worker(supervisor: int, port: int, status: str) -> collections.Counter[int]:
    """The TCP sockets on ``port`` in ``status`` of each worker under ``supervisor``."""
    workers = set(_children(supervisor))
    return collections.Counter(
        conn.pid
        for conn in psutil.net_connections(kind="tcp")
        if conn.status == status and conn.laddr and conn.laddr.port == port and conn.pid in workers
    )


@spreading
def test_serve_spreads_a_clients_keep_alive_connections_over_its_workers(
    tmp_path: Path,
) -> None:
    """As uvicorn's supervisor shares one socket, the worker that accepted last usually
    accepts the next as well, and one worker served most connections alone."""
    with ServerProcess(tmp_path / "s.db", extra_args=["--workers", "2"]) as server:
        assert server._proc is not None
        supervisor, port = server._proc.pid, int(server.url.rsplit(":", 1)[1])
        # "serving on" is said before the workers listen; each listens on its own socket.
        listening = functools.partial(_by_worker, supervisor, port, psutil.CONN_LISTEN)
        wait_for(lambda: len(listening()) == 2, 30, lambda: f"listening: {listening()}")
        with contextlib.ExitStack() as stack:
            clients = [
                stack.enter_context(httpx.Client(base_url=server.url)) for _ in range(CONNECTIONS)
            ]
            for client in clients:  # one request each, its connection kept alive
                assert client.get(HEALTH_PATH).status_code == 200
            counts = _by_worker(supervisor, port, psutil.CONN_ESTABLISHED)
        assert sum(counts.values()) == CONNECTIONS, counts
        assert len(counts) == 2 and min(counts.values()) >= FAIR_SHARE, counts
        # A second server on the same address is refused, as ever: the group is closed.
        second = refused(tmp_path / "t.db", "--port", str(port), "--workers", "2")
        assert second.returncode == 2, second.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
