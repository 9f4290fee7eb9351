"""RabbitMQ (AMQP 0-9-1): each message is published to exchange ``exchange`` (a durable
topic exchange, made if missing) with the topic as routing key, persistent, with the
outbox message id as ``message_id`` and the outbox row id in the ``pigeon-outbox-id``
header, ``mandatory`` set, on a channel in publisher-confirm mode.

The confirmation is the broker's ack. A message no queue is bound for comes back
(basic.return) and counts as not confirmed: the row waits, the relay backs off, and the
error names the routing key, until a queue is bound (``?queue=NAME`` declares a durable
queue bound to every topic, for a quick start). A nack is not confirmed either.

RabbitMQ has no broker-side dedup: a relay that dies after the ack and before the mark
publishes those rows again, and the consumers see them twice with the same
``message_id`` (dedup there, e.g. an effect keyed by it).

Why aio-pika (over pika): publisher confirms with many messages on the wire, on the same
asyncio loop thread the NATS publisher uses; pika's ``BlockingConnection`` waits for
each confirm in turn (one round trip per message).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pigeon.jobs.publishers import OPTIONS, strip_query, url_options
from pigeon.jobs.publishers._loop import LoopThread

if TYPE_CHECKING:
    from pigeon.jobs.publishers.messages import Message

DEFAULT_EXCHANGE = "pigeon"


class UnconfirmedError(Exception):
    """The broker returned (unroutable) or nacked a message."""


class AmqpPublisher:
    def __init__(
        self,
        url: str,
        *,
        exchange: str = DEFAULT_EXCHANGE,
        queue: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.url = url
        self.exchange = exchange
        self.queue = queue
        self.timeout = timeout
        self._loop = LoopThread("pigeon-relay-amqp")
        self._connection: Any = None
        self._channel: Any = None

    def publish(self, message: Message) -> None:
        self.publish_many([message])

    def publish_many(self, messages: Sequence[Message]) -> int:
        self._loop.run_batch(self._publish_many(messages), self.timeout * 2 + 5, self._drop)
        return 0  # no broker-side dedup: a repeat is delivered again

    async def _connect(self) -> Any:
        if self._channel is not None and not self._channel.is_closed:
            return await self._channel.get_underlay_channel()
        import aio_pika
        import aio_pika.connection

        await self._aclose()
        # aio_pika.connect, failing, leaves its connection to __del__, which starts a close
        # no loop ever runs (a coroutine never awaited): made and closed here instead.
        connection = aio_pika.Connection(aio_pika.connection.make_url(self.url))
        try:
            await connection.connect(timeout=self.timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await connection.close()
            raise
        self._connection = connection
        channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange = await channel.declare_exchange(
            self.exchange, aio_pika.ExchangeType.TOPIC, durable=True, timeout=self.timeout
        )
        if self.queue:
            queue = await channel.declare_queue(self.queue, durable=True, timeout=self.timeout)
            await queue.bind(exchange, "#", timeout=self.timeout)
        self._channel = channel
        return await channel.get_underlay_channel()

    async def _publish_many(self, messages: Sequence[Message]) -> None:
        from aiormq import spec

        from pigeon.jobs.publishers.messages import PartialPublish

        underlay = await self._connect()
        confirms: list[asyncio.Task[Any]] = []
        for m in messages:
            headers: dict[str, Any] = {"pigeon-topic": m.topic}
            if m.seq is not None:
                headers["pigeon-outbox-id"] = m.seq
            properties = spec.Basic.Properties(
                content_type="application/json",
                delivery_mode=2,  # persistent
                message_id=m.id,
                headers=headers,
            )
            confirms.append(
                asyncio.create_task(
                    underlay.basic_publish(
                        m.body(),
                        exchange=self.exchange,
                        routing_key=m.topic,
                        properties=properties,
                        mandatory=True,
                        timeout=self.timeout,
                    )
                )
            )
            # Let it take the channel's (first-come) lock and its delivery tag now, so
            # the frames leave in outbox order.
            await asyncio.sleep(0)
        for i, task in enumerate(confirms):
            try:
                frame = await task
                if not isinstance(frame, spec.Basic.Ack):
                    raise UnconfirmedError(f"not confirmed by the broker: {frame!r}")
            except Exception as exc:
                for rest in confirms[i + 1 :]:
                    rest.cancel()
                await asyncio.gather(*confirms[i + 1 :], return_exceptions=True)
                raise PartialPublish(i, _explained(exc, messages[i], self.exchange)) from exc

    def _drop(self) -> None:
        try:
            self._loop.run(self._aclose(), 5)
        except Exception:
            self._connection = self._channel = None

    async def _aclose(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), 2)

    def close(self) -> None:
        self._drop()
        self._loop.close()


def _explained(exc: BaseException, message: Message, exchange: str) -> BaseException:
    from aiormq.exceptions import PublishError

    if isinstance(exc, PublishError):
        return UnconfirmedError(
            f"unroutable: no queue is bound to exchange {exchange!r} for routing key "
            f"{message.topic!r} (returned by the broker; bind one, or add ?queue=NAME)"
        )
    return exc


def from_url(url: str) -> AmqpPublisher:
    """``amqp://user:password@host[:port][/vhost][?exchange=pigeon&queue=NAME]``."""
    import aio_pika  # noqa: F401 - the extra is missing: say so now, not at the first publish

    options = url_options(url, OPTIONS["amqp"])
    return AmqpPublisher(
        strip_query(url),
        exchange=options.get("exchange", DEFAULT_EXCHANGE),
        queue=options.get("queue") or None,
    )
