"""Test tools for the relay on real brokers: a target per broker (the relay URL with names
of this test's own, a reader of what the broker holds, in its order, and a cleanup), broker
instances a test may stop and start (Redis, NATS on free ports with their own data
directories) and a TCP proxy whose connections a test can cut (RabbitMQ)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests import processes

TOPIC = "answers.received"


@dataclass
class Target:
    kind: str
    url: str  # what the relay is given
    read: Callable[[], list[str]]  # message ids as the broker holds them, in its order
    cleanup: Callable[[], None]

    @property
    def dedups(self) -> bool:
        return self.kind != "amqp"


def make_target(kind: str, base_url: str, relay_base: str | None = None) -> Target:
    """Names of this test's own on the broker at ``base_url``; the relay is given
    ``relay_base`` (a proxy in front of it, say) with those names."""
    name = f"pigeont{uuid.uuid4().hex[:10]}"
    relay_base = relay_base or base_url
    sep = "&" if "?" in relay_base else "?"
    if kind == "redis":
        prefix = f"{name}:"
        return Target(
            kind,
            f"{relay_base}{sep}prefix={prefix}",
            lambda: read_redis(base_url, prefix + TOPIC),
            lambda: clean_redis(base_url, prefix),
        )
    if kind == "nats":
        stream = name.upper()
        return Target(
            kind,
            f"{relay_base}{sep}stream={stream}&subject_prefix={name}.",
            lambda: read_nats(base_url, stream),
            lambda: clean_nats(base_url, stream),
        )
    return Target(
        kind,
        f"{relay_base}{sep}exchange={name}&queue={name}",
        lambda: read_amqp(base_url, name),
        lambda: clean_amqp(base_url, name),
    )


def read_redis(url: str, stream: str) -> list[str]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return [f[b"message_id"].decode() for _, f in client.xrange(stream)]
    finally:
        client.close()


def clean_redis(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(f"{prefix}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()


def read_nats(url: str, stream: str) -> list[str]:
    import nats

    async def read() -> list[str]:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            info = await js.stream_info(stream)
            ids = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                msg = await js.get_msg(stream, seq)
                ids.append((msg.headers or {})["Nats-Msg-Id"])
            return ids
        finally:
            await nc.close()

    return asyncio.run(read())


def clean_nats(url: str, stream: str) -> None:
    import nats

    async def clean() -> None:
        nc = await nats.connect(url)
        try:
            with contextlib.suppress(Exception):
                await nc.jetstream().delete_stream(stream)
        finally:
            await nc.close()

    asyncio.run(clean())


def read_amqp(url: str, queue: str) -> list[str]:
    import aio_pika

    async def read() -> list[str]:
        connection = await aio_pika.connect(url)
        try:
            channel = await connection.channel()
            q = await channel.declare_queue(queue, durable=True, passive=True)
            ids = []
            while (message := await q.get(no_ack=True, fail=False)) is not None:
                ids.append(str(message.message_id))
            return ids
        finally:
            await connection.close()

    return asyncio.run(read())


def clean_amqp(url: str, name: str) -> None:
    import aio_pika

    async def clean() -> None:
        connection = await aio_pika.connect(url)
        try:
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
            with contextlib.suppress(Exception):
                await channel.exchange_delete(name)
        finally:
            await connection.close()

    asyncio.run(clean())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


class OwnBroker:
    """A Redis or NATS server of this test's own, on a free port, with its data in
    ``directory`` so that a stop and a start keep what it had confirmed."""

    def __init__(self, kind: str, directory: Path) -> None:
        exe = "redis-server" if kind == "redis" else "nats-server"
        if shutil.which(exe) is None and not Path(f"/usr/sbin/{exe}").exists():
            if os.environ.get("PIGEON_REQUIRE_PG") == "1":  # CI: the brokers must be there
                pytest.fail(f"PIGEON_REQUIRE_PG=1 but {exe} is not installed")
            pytest.skip(f"{exe} is not installed")
        self.kind = kind
        self.port = free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        scheme = "redis" if kind == "redis" else "nats"
        self.url = f"{scheme}://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        port = str(self.port)
        if self.kind == "redis":
            return [
                "redis-server",
                "--bind", "127.0.0.1", "--port", port, "--dir", str(self.directory),
                "--save", "", "--appendonly", "yes", "--appendfsync", "always",
            ]  # fmt: skip
        exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
        return [exe, "-a", "127.0.0.1", "-p", port, "-js", "-sd", str(self.directory)]

    def start(self) -> None:
        self.proc = processes.spawn(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.port)
        if self.kind == "nats":
            time.sleep(0.2)  # JetStream recovers its streams just after the port opens

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop(self.proc)  # SIGTERM, a clean shutdown: Redis writes its AOF, NATS syncs
            self.proc = None


class CutProxy:
    """A TCP proxy to ``(host, port)``; ``cut()`` closes every connection through it and
    refuses new ones until ``restore()``: the broker is gone as far as a client can tell."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._cut = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url_for(self, url: str) -> str:
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        return parts._replace(netloc=f"{auth}127.0.0.1:{self.port}").geturl()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.listener.close()


def first_occurrences(ids: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def fill(db: Any, n: int, start: int = 0) -> list[str]:
    from pigeon.jobs import outbox

    with db.transaction() as tx:
        return [outbox.add(tx, TOPIC, {"n": i}) for i in range(start, start + n)]
