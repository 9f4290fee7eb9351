"""The app's broker as the rehearsal uses it: names of the run's own on it (a Redis
stream prefix, a NATS stream and subject prefix, a RabbitMQ exchange and queue), the
relay's URL with them, what the broker holds under them, and their removal at the end.
The broker's client comes with the ``relay`` extra, as it does for ``pigeon relay``."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from pigeon.extras import require_extra
from pigeon.jobs.publishers import broker_kind

DEFAULT_PORTS = {"redis": 6379, "nats": 4222, "amqp": 5672}


@dataclass
class Broker:
    """The broker at ``url`` under names of this run's own (``name``)."""

    url: str
    name: str = field(default_factory=lambda: f"pigeonrehearse{uuid.uuid4().hex[:10]}")

    def __post_init__(self) -> None:
        self.kind = broker_kind(self.url)
        require_extra("relay", f"publishing to {self.kind}")

    @property
    def default_port(self) -> int:
        return DEFAULT_PORTS[self.kind]

    def relay_url(self, base: str) -> str:
        """``base`` (the broker's URL, or a proxy's) with this run's names."""
        sep = "&" if "?" in base else "?"
        names = {
            "redis": f"prefix={self.name}:",
            "nats": f"stream={self.name.upper()}&subject_prefix={self.name}.",
            "amqp": f"exchange={self.name}&queue={self.name}",
        }
        return f"{base}{sep}{names[self.kind]}"

    def message_ids(self, topics: list[str]) -> list[str]:
        """The outbox message ids the broker holds under this run's names, repeats kept."""
        if self.kind == "redis":
            return _redis_ids(self.url, [f"{self.name}:{t}" for t in topics])
        if self.kind == "nats":
            return asyncio.run(_nats_ids(self.url, self.name.upper()))
        return asyncio.run(_amqp_ids(self.url, self.name))

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            if self.kind == "redis":
                _redis_clean(self.url, f"{self.name}:")
            elif self.kind == "nats":
                asyncio.run(_nats_clean(self.url, self.name.upper()))
            else:
                asyncio.run(_amqp_clean(self.url, self.name))


def _base(url: str) -> str:
    return url.split("?", 1)[0]


def _redis_ids(url: str, streams: list[str]) -> list[str]:
    import redis

    client: Any = redis.Redis.from_url(_base(url))
    try:
        return [
            fields[b"message_id"].decode()
            for stream in streams
            for _, fields in client.xrange(stream)
        ]
    finally:
        client.close()


def _redis_clean(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(_base(url))
    try:
        keys = list(client.scan_iter(f"{prefix}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()


async def _nats_ids(url: str, stream: str) -> list[str]:
    import nats

    nc = await nats.connect(_base(url))
    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info(stream)
        except Exception:
            return []  # nothing was ever published: the relay makes the stream
        ids = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            ids.append((msg.headers or {}).get("Nats-Msg-Id", ""))
        return ids
    finally:
        await nc.close()


async def _nats_clean(url: str, stream: str) -> None:
    import nats

    nc = await nats.connect(_base(url))
    try:
        await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


async def _amqp_ids(url: str, queue: str) -> list[str]:
    import aio_pika

    connection: Any = await aio_pika.connect(_base(url))
    try:
        channel = await connection.channel()
        try:
            q = await channel.declare_queue(queue, durable=True, passive=True)
        except Exception:
            return []
        ids = []
        while (message := await q.get(no_ack=True, fail=False)) is not None:
            ids.append(str(message.message_id))
        return ids
    finally:
        await connection.close()


async def _amqp_clean(url: str, name: str) -> None:
    import aio_pika

    connection: Any = await aio_pika.connect(_base(url))
    try:
        channel = await connection.channel()
        await channel.queue_delete(name)
        await channel.exchange_delete(name)
    finally:
        await connection.close()
