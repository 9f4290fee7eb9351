"""NATS JetStream: each message goes to subject ``<subject_prefix><topic>`` of stream
``stream`` (made if missing, capturing ``<subject_prefix>>``), with the outbox message id
in the ``Nats-Msg-Id`` header. The confirmation is the stream's PubAck; a re-publication
within the stream's duplicate window (``dedup``, 1 hour by default for a stream made here;
an existing stream keeps its own) is acknowledged as a duplicate and not stored again.

A batch is published with many messages on the wire (``publish_async``, in order on one
connection) and the acks awaited in order: the first one missing or refused ends the
batch there. The client never reconnects by itself (its reconnect buffer would resend
behind the relay's back): on any failure the connection is dropped and the relay, after
its backoff, connects again and starts from the first unconfirmed row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pigeon.jobs.publishers import OPTIONS, strip_query, url_options
from pigeon.jobs.publishers._loop import LoopThread

if TYPE_CHECKING:
    from pigeon.jobs.publishers.messages import Message

log = logging.getLogger("pigeon.jobs.relay")

DEFAULT_STREAM = "PIGEON"
DEFAULT_PREFIX = "pigeon."
DEFAULT_DEDUP = 3600.0


class NatsJetStreamPublisher:
    def __init__(
        self,
        url: str,
        *,
        stream: str = DEFAULT_STREAM,
        subject_prefix: str = DEFAULT_PREFIX,
        dedup_seconds: float = DEFAULT_DEDUP,
        timeout: float = 5.0,
    ) -> None:
        self.url = url
        self.stream = stream
        self.subject_prefix = subject_prefix
        self.dedup_seconds = dedup_seconds
        self.timeout = timeout
        self._loop = LoopThread("pigeon-relay-nats")
        self._nc: Any = None
        self._js: Any = None

    def publish(self, message: Message) -> None:
        self.publish_many([message])

    def publish_many(self, messages: Sequence[Message]) -> int:
        return self._loop.run_batch(self._publish_many(messages), self.timeout * 2 + 5, self._drop)

    async def _connect(self) -> Any:
        if self._js is not None and self._nc is not None and self._nc.is_connected:
            return self._js
        import nats
        from nats.js.errors import NotFoundError

        await self._aclose()
        self._nc = await nats.connect(
            servers=[self.url],
            allow_reconnect=False,
            connect_timeout=max(1, round(self.timeout)),
            # nats-py's initial connect retries for ever with 0; 1 is two quick tries,
            # then NoServersError: the relay's backoff decides when to try again.
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=_log_error,
        )
        js = self._nc.jetstream(timeout=self.timeout)
        try:
            await js.stream_info(self.stream)
        except NotFoundError:
            await js.add_stream(
                name=self.stream,
                subjects=[self.subject_prefix + ">"],
                duplicate_window=self.dedup_seconds,
            )
        self._js = js
        return js

    async def _publish_many(self, messages: Sequence[Message]) -> int:
        from pigeon.jobs.publishers.messages import PartialPublish

        js = await self._connect()
        acks: list[asyncio.Future[Any]] = []
        try:
            for m in messages:
                headers = {"Nats-Msg-Id": m.id}
                if m.seq is not None:
                    headers["Pigeon-Outbox-Id"] = str(m.seq)
                acks.append(
                    await js.publish_async(
                        self.subject_prefix + m.topic,
                        m.body(),
                        headers=headers,  # no wait_stall: a batch never fills the window
                    )
                )
        except Exception as exc:
            confirmed, duplicates = await self._settle(acks)
            raise PartialPublish(confirmed, exc, duplicates) from exc
        # Wait for them all at once (one timer), then read them in order.
        await asyncio.wait(acks, timeout=self.timeout)
        duplicates = 0
        for i, ack in enumerate(acks):
            if not ack.done() or ack.cancelled() or ack.exception() is not None:
                error = (
                    ack.exception()
                    if ack.done() and not ack.cancelled()
                    else TimeoutError(f"no PubAck within {self.timeout} s")
                )
                for rest in acks[i:]:
                    rest.cancel()
                raise PartialPublish(i, error or TimeoutError(), duplicates)
            duplicates += bool(ack.result().duplicate)
        return duplicates

    async def _settle(self, acks: list[asyncio.Future[Any]]) -> tuple[int, int]:
        """How many acks from the start came back (briefly waiting), and their duplicates."""
        confirmed = duplicates = 0
        for ack in acks:
            try:
                result = await asyncio.wait_for(asyncio.shield(ack), 0.5)
            except Exception:
                break
            confirmed += 1
            duplicates += bool(result.duplicate)
        for rest in acks[confirmed:]:
            rest.cancel()
        return confirmed, duplicates

    def _drop(self) -> None:
        try:
            self._loop.run(self._aclose(), 5)
        except Exception:
            self._nc = self._js = None

    async def _aclose(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2)

    def close(self) -> None:
        self._drop()
        self._loop.close()


async def _log_error(exc: Exception) -> None:
    # The client's default logs a traceback per failed attempt; the relay says it once.
    log.debug("nats client: %r", exc)


def from_url(url: str) -> NatsJetStreamPublisher:
    """``nats://[user:password@]host[:port][?stream=PIGEON&subject_prefix=pigeon.&dedup=S]``."""
    import nats  # noqa: F401 - the extra is missing: say so now, not at the first publish

    options = url_options(url, OPTIONS["nats"])
    return NatsJetStreamPublisher(
        strip_query(url),
        stream=options.get("stream", DEFAULT_STREAM),
        subject_prefix=options.get("subject_prefix", DEFAULT_PREFIX),
        dedup_seconds=options.get("dedup", DEFAULT_DEDUP),
    )
