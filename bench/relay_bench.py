"""The outbox relay on each real broker, beside the broker's own raw publish rate in the
same run.

pigeon: N outbox rows (SQLite, one topic) published by ``Relay.drain()`` with its
defaults (batches of 100 on the wire, each row marked after the broker's confirmation).
Baseline: the broker client alone publishing N messages of the same size with the same
confirmation, 100 on the wire at a time, and nothing else (no database, no dedup):

- Redis: pipelines of 100 ``XADD stream * ...`` (the reply is the confirmation);
- NATS: ``publish_async`` of 100 to a JetStream stream, then their PubAcks;
- RabbitMQ: 100 ``basic_publish`` on a confirm-mode channel (aiormq), then their acks.

Both sides get the same warm-up before the clock: one window of 100 messages published
and confirmed on the connection the timed part uses (pigeon: a first ``drain()`` of 100
outbox rows, which connects and declares its stream, exchange or queue; the raw clients
after connecting and declaring theirs).

A broker that does not answer is left out, with a line saying so.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from bench._report import Row, rate, row
from pigeon.jobs import outbox
from pigeon.jobs.publishers import open_publisher
from pigeon.jobs.relay import Relay
from pigeon.storage.server import open_server_db

URLS = {
    "redis": "redis://127.0.0.1:6379/0",
    "nats": "nats://127.0.0.1:4222",
    "amqp": "amqp://guest:guest@127.0.0.1:5672/",
}
NAMES = {"redis": "Redis Streams", "nats": "NATS JetStream", "amqp": "RabbitMQ"}
WINDOW = 100
PAYLOAD = {"record": "00000000-0000-0000-0000-000000000000", "question": "q" * 40}
BODY = b'{"question":"' + b"q" * 40 + b'","record":"00000000-0000-0000-0000-000000000000"}'


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=2).close()
        return True
    except OSError:
        return False


def _pigeon(kind: str, folder: Path, n: int, name: str) -> float:
    db = open_server_db(str(folder / f"{kind}.db"), durability="normal")

    def fill(count: int) -> None:
        with db.transaction() as tx:
            for _ in range(count):
                outbox.add(tx, "bench", PAYLOAD)

    option = {"redis": f"prefix={name}:", "nats": f"stream={name.upper()}&subject_prefix={name}."}
    url = URLS[kind] + "?" + option.get(kind, f"exchange={name}&queue={name}")
    publisher = open_publisher(url)
    try:
        relay = Relay(db, publisher)
        fill(WINDOW)
        warmed = relay.drain()  # the warm-up window: connected, declared, first confirms
        fill(n)
        start = time.perf_counter()
        published = relay.drain()
        elapsed = time.perf_counter() - start
    finally:
        publisher.close()
        db.close()
    assert (warmed, published) == (WINDOW, n), (warmed, published, relay.last_error)
    return rate(n, elapsed)


def _raw_redis(n: int, name: str) -> float:
    import redis

    client = redis.Redis.from_url(URLS["redis"])
    stream = f"{name}:raw"

    def window(i: int) -> None:
        pipe = client.pipeline(transaction=False)
        for j in range(i, min(n, i + WINDOW)):
            pipe.xadd(stream, {"message_id": str(j), "topic": "bench", "payload": BODY})
        pipe.execute()

    window(-WINDOW)  # the warm-up window, as pigeon's
    start = time.perf_counter()
    for i in range(0, n, WINDOW):
        window(i)
    elapsed = time.perf_counter() - start
    client.close()
    return rate(n, elapsed)


def _raw_nats(n: int, name: str) -> float:
    import nats

    async def go() -> float:
        nc = await nats.connect(URLS["nats"])
        js = nc.jetstream()
        await js.add_stream(name=f"{name.upper()}RAW", subjects=[f"{name}raw.>"])

        async def window(i: int) -> None:
            acks = [
                await js.publish_async(f"{name}raw.bench", BODY)
                for _ in range(i, min(n, i + WINDOW))
            ]
            for ack in acks:
                await ack

        await window(-WINDOW)  # the warm-up window, as pigeon's
        start = time.perf_counter()
        for i in range(0, n, WINDOW):
            await window(i)
        elapsed = time.perf_counter() - start
        await js.delete_stream(f"{name.upper()}RAW")
        await nc.close()
        return rate(n, elapsed)

    return asyncio.run(go())


def _raw_amqp(n: int, name: str) -> float:
    import aiormq
    from aiormq import spec

    async def go() -> float:
        connection = await aiormq.connect(URLS["amqp"])
        channel = await connection.channel(publisher_confirms=True)
        queue = f"{name}raw"
        await channel.queue_declare(queue, durable=True)

        async def window(i: int) -> None:
            confirms = [
                asyncio.ensure_future(
                    channel.basic_publish(
                        BODY,
                        routing_key=queue,
                        properties=spec.Basic.Properties(delivery_mode=2, message_id=str(j)),
                        mandatory=True,
                    )
                )
                for j in range(i, min(n, i + WINDOW))
            ]
            await asyncio.gather(*confirms)

        await window(-WINDOW)  # the warm-up window, as pigeon's
        start = time.perf_counter()
        for i in range(0, n, WINDOW):
            await window(i)
        elapsed = time.perf_counter() - start
        await channel.queue_delete(queue)
        await connection.close()
        return rate(n, elapsed)

    return asyncio.run(go())


RAW: dict[str, Callable[[int, str], float]] = {
    "redis": _raw_redis,
    "nats": _raw_nats,
    "amqp": _raw_amqp,
}


def _cleanup(kind: str, name: str) -> None:
    """Drop what the pigeon run left on the broker (the raw runs drop their own)."""
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(URLS[kind])
        keys = list(client.scan_iter(f"{name}:*", count=1000))
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i : i + 1000])
        client.close()
        return

    async def drop() -> None:
        if kind == "nats":
            import nats

            nc = await nats.connect(URLS[kind])
            await nc.jetstream().delete_stream(name.upper())
            await nc.close()
            return
        import aiormq

        connection = await aiormq.connect(URLS[kind])
        channel = await connection.channel()
        await channel.queue_delete(name)
        await channel.exchange_delete(name)
        await connection.close()

    asyncio.run(drop())


def run(quick: bool = False) -> list[Row]:
    n = 5_000 if quick else 20_000
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("redis", "nats", "amqp"):
            if not _answers(URLS[kind]):
                print(f"relay bench: {kind} at {URLS[kind]} does not answer, left out")
                continue
            name = f"pigeonbench{uuid.uuid4().hex[:8]}"
            try:
                raw = RAW[kind](n, name)
                ours = _pigeon(kind, Path(tmp), n, name)
            finally:
                _cleanup(kind, name)
            rows.append(
                row(
                    f"outbox relay to {NAMES[kind]}, {n:,} rows (confirmed, then marked)",
                    ours,
                    raw,
                    unit="msgs/s",
                    baseline_name=f"raw {kind} client, {WINDOW} on the wire, no database",
                    target="report",
                    ok=True,
                )
            )
    return rows


if __name__ == "__main__":
    from bench._report import print_rows

    print_rows(run(quick=True))
