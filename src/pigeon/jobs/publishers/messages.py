"""What the relay hands a publisher, and what a publisher promises: the one message type
every broker's publisher and the relay share (in a module of its own, so that the relay
imports the publishers and no publisher imports the relay)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pigeon.jobs.manager import describe


@dataclass(frozen=True)
class Message:
    id: str  # the outbox message id, minted once: every re-publication carries it
    topic: str
    payload: Any
    created_at: float
    seq: int | None = None  # the outbox row id: the order the relay publishes in

    def body(self) -> bytes:
        return json.dumps(self.payload, sort_keys=True, separators=(",", ":")).encode()


class Publisher(Protocol):
    def publish(self, message: Message) -> None:
        """Deliver or raise. Must be safe to call twice with the same message id."""


@runtime_checkable
class BatchPublisher(Protocol):
    def publish(self, message: Message) -> None: ...

    def publish_many(self, messages: Sequence[Message]) -> int:
        """Publish in order, several on the wire at once; return how many of them the
        broker dropped as duplicates. If one is not confirmed, raise ``PartialPublish``
        saying how many from the start were."""


class PartialPublish(Exception):
    """``confirmed`` messages from the start of a batch were confirmed; the next one was
    not (``__cause__`` says why)."""

    def __init__(self, confirmed: int, cause: BaseException, duplicates: int = 0) -> None:
        super().__init__(f"{confirmed} confirmed, then: {describe(cause)}")
        self.confirmed = confirmed
        self.cause = cause
        self.duplicates = duplicates  # of the confirmed ones
