"""Round trips and statements to PostgreSQL, counted on the wire: a TCP relay in front of
the server.

A round trip is the client speaking and then waiting for the server's answer: the relay
counts the client's turns, each burst of bytes the client sends after the server last
spoke (or first), once its last turn ended with a message the client waits after (a Sync,
a simple Query, a Flush, the startup or a password): the server answering the head of a
pipeline while its tail is still on the way (a busy machine) starts no turn, nor does a
Flush sent after an awaited answer (psycopg sends one behind the Sync that ends a
pipeline, and waits no longer for it). Statements
sent together without waiting (psycopg's pipeline mode) are one turn; BEGIN, sent by the
driver on its own before a transaction's first statement, is one. Statements are the
client's Query and Execute messages (BEGIN and COMMIT included). A statement sent as text
again is a Parse message of a statement with parameters (``$1``): one the driver has
prepared on the connection goes as a Bind of its name. Whatever the driver or the ORM
does, this is what the network sees.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg

_STATEMENTS = (b"Q", b"E")  # a simple query; the Execute of the extended protocol
_WAITS = (b"S", b"Q", b"H", b"p", b"")  # Sync, Query, Flush, password; b"": untyped (startup)
_STARTUP = 196608  # protocol 3.0: the startup message, after which every message is typed


@dataclass
class Counts:
    turns: int = 0
    statements: int = 0
    parsed: int = 0  # statements with parameters sent as text (not prepared)


class _Messages:
    """The client's side of one connection, split into protocol messages."""

    def __init__(self) -> None:
        self.buffer = b""
        self.typed = False  # past the startup message (SSLRequest and the like come first)
        self.waiting = True  # has the client sent a message it waits for an answer after?
        self.turn = False  # spoke after an answer it waited for: a turn, from its next message
        self.parsed = 0  # Parse messages of a statement with parameters, so far

    def spoken(self, data: bytes, *, after_answer: bool) -> tuple[int, int]:
        """``feed`` of what the client sent, ``after_answer``: the server spoke since the
        client's last bytes."""
        if after_answer and self.waiting:
            self.turn, self.waiting = True, False
        return self.feed(data)

    def feed(self, data: bytes) -> tuple[int, int]:
        """How many statements, and turns, ``data`` completes. A turn starts at the first
        message after an awaited answer that is not a Flush: psycopg leaving a pipeline
        sends a Flush behind its Sync, which on a busy machine reaches the server after
        the Sync's answer left it; the client waits no longer for it."""
        self.buffer += data
        found = turns = 0
        while True:
            head = 5 if self.typed else 4
            if len(self.buffer) < head:
                return found, turns
            kind = self.buffer[:1] if self.typed else b""
            (length,) = struct.unpack("!i", self.buffer[head - 4 : head])
            size = length + (1 if self.typed else 0)
            if len(self.buffer) < size:
                return found, turns
            if not self.typed and struct.unpack("!i", self.buffer[4:8])[0] == _STARTUP:
                self.typed = True
            found += kind in _STATEMENTS
            self.parsed += kind == b"P" and b"$1" in self.buffer[5:size]
            if self.turn and kind != b"H":
                turns, self.turn = turns + 1, False
            self.waiting = self.waiting or kind in _WAITS
            self.buffer = self.buffer[size:]


class RoundTrips:
    """Relay 127.0.0.1:``port`` to ``upstream``; count the client's turns and statements.

    It can also fail as a network does: ``cut()`` (the server gone: connections closed,
    new ones refused) and ``stall()`` (a partition: bytes vanish, nothing is closed),
    each until ``restore()``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.counts = Counts()
        self.state = "open"  # or "cut", "stalled"
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._relayed: list[socket.socket] = []  # closed with the relay
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self.state != "open":  # refused; or, stalled, left hanging unanswered
                with self._lock:
                    self._relayed.append(client)
                if self.state == "cut":
                    client.close()
                continue
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._relayed += [client, server]
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            last = ["server"]  # who spoke last on this connection
            messages = _Messages()
            for source, sink in ((client, server), (server, client)):
                args = (source, sink, last, messages if source is client else None)
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        last: list[str],
        messages: _Messages | None,
    ) -> None:
        side = "server" if messages is None else "client"
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                with self._lock:
                    if messages is not None:
                        after_answer = last[0] == "server"
                        parsed = messages.parsed
                        statements, turns = messages.spoken(data, after_answer=after_answer)
                        self.counts.statements += statements
                        self.counts.turns += turns
                        self.counts.parsed += messages.parsed - parsed
                    last[0] = side
                if self.state == "open":  # stalled: lost on the way
                    sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    @contextlib.contextmanager
    def counting(self) -> Iterator[Counts]:
        """The turns, statements and parsed statements of the block, in the ``Counts``
        once it ends."""
        counted = Counts()
        with self._lock:
            before = Counts(self.counts.turns, self.counts.statements, self.counts.parsed)
        try:
            yield counted
        finally:
            with self._lock:
                counted.turns = self.counts.turns - before.turns
                counted.statements = self.counts.statements - before.statements
                counted.parsed = self.counts.parsed - before.parsed

    def cut(self) -> None:
        self.state = "cut"
        self._drop_relayed()

    def stall(self) -> None:
        self.state = "stalled"

    def restore(self) -> None:
        """Connections through again; those a stall held are closed (what they lost is
        never resent)."""
        if self.state == "stalled":
            self._drop_relayed()
        self.state = "open"

    def close(self) -> None:
        self._listener.close()
        self._drop_relayed()

    def _drop_relayed(self) -> None:
        with self._lock:
            relayed, self._relayed = self._relayed, []
        for sock in relayed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def relay_for(url: str) -> RoundTrips:
    """A relay in front of the server of ``url`` (a postgresql:// URL)."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return RoundTrips((str(info.get("host", "127.0.0.1")), int(str(info.get("port", 5432)))))


def relayed_url(url: str, relay: RoundTrips) -> str:
    """``url``'s database, reached through ``relay``."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return f"postgresql://{info.get('user', 'postgres')}@127.0.0.1:{relay.port}/{info['dbname']}"
