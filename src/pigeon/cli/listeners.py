"""The listening sockets of ``pigeon serve``.

The serving process binds one socket first, without SO_REUSEPORT, so an address some
other server listens on is refused with its reason before anything else happens. One
worker listens on it. Under ``--workers N`` on Linux each worker listens on a socket of
its own, bound to the same address with SO_REUSEPORT, and the kernel spreads new
connections over the workers by their addresses. Sharing the one socket instead, as
uvicorn's supervisor does, leaves the accept to whichever worker wakes first, and the
one that just accepted usually does: here, one of two workers took 6 to 8 of a client's
8 keep-alive connections and served them alone while the other idled.
"""

from __future__ import annotations

import logging
import socket
import sys

import typer
from uvicorn.config import STARTUP_FAILURE

# Where the kernel spreads a SO_REUSEPORT group's connections over its sockets: BSD and
# macOS take the option but hand every connection to one of them.
SPREADS_CONNECTIONS = sys.platform.startswith("linux")

log = logging.getLogger("pigeon.serve")


def listen_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening, whose ``proto`` says TCP.

    asyncio sets TCP_NODELAY on accepted connections only when the listening socket's
    proto is IPPROTO_TCP; uvicorn's own ``bind_socket`` leaves it 0, and then every
    response waits out Nagle + delayed ACK (about 40 ms per request on loopback).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:  # OverflowError: a port outside 0-65535
        sock.close()
        raise typer.BadParameter(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.set_inheritable(True)
    return sock


def worker_sockets(sock: socket.socket, workers: int) -> list[socket.socket]:
    """What uvicorn's supervisor hands each worker it starts, ``sock`` being the socket
    this process bound: ``[sock]`` itself, shared, or where the kernel spreads a group's
    connections, a list each worker receives as a socket of its own (`OwnSockets`)."""
    if workers == 1 or not SPREADS_CONNECTIONS:
        return [sock]
    # The bound socket joins the group and keeps the address while workers come and go;
    # it never listens, so no connection waits in it.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    host, port = sock.getsockname()[:2]
    return OwnSockets(host, port)


class OwnSockets(list[socket.socket]):
    """Empty here; in each worker uvicorn starts (it pickles what it hands them), a new
    SO_REUSEPORT socket bound to (host, port): a worker that replaces one that died binds
    its own as well. Connections waiting in a dead worker's socket are reset, before any
    byte of theirs was read."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self.host, self.port = host, port

    def __reduce__(self) -> tuple[object, tuple[str, int]]:
        return (own_socket, (self.host, self.port))


def own_socket(host: str, port: int) -> list[socket.socket]:
    """A worker's own socket in the group bound to (host, port)."""
    try:
        return [listen_socket(host, port, reuse_port=True)]
    except typer.BadParameter as exc:
        # In a worker that is starting: one line, and the exit code on which uvicorn's
        # supervisor stops instead of starting the worker again for ever.
        log.error("pigeon serve: %s", exc)
        sys.exit(STARTUP_FAILURE)
