"""The ids the server side makes for rows it indexes (records, outbox messages, provider
call keys) are time-ordered UUIDs (`pigeon.core.ids`): each index grows at its end."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pigeon.jobs import outbox, records
from pigeon.jobs.providers import call_provider, provider_call
from pigeon.storage.base import Database


class Bank:
    name = "bank"

    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        return {"charge": idempotency_key}

    def lookup(self, reference: str) -> Any | None:
        return None


def _time_ordered(made: list[str]) -> bool:
    return all(uuid.UUID(text).version == 7 for text in made) and made == sorted(made)


def test_record_outbox_and_provider_call_ids_are_time_ordered(db: Database) -> None:
    made: list[tuple[str, str, str]] = []
    for i in range(4):
        with db.transaction() as tx:
            record_id = records.accept(tx, kind="order", data={"n": i})
            message_id = outbox.add(tx, "orders", {"n": i})
        call_provider(db, Bank(), f"order:{i}", {"amount": i})
        stored = provider_call(db, f"order:{i}")
        assert stored is not None
        made.append((record_id, message_id, stored["idempotency_key"]))
        time.sleep(0.002)  # the next ones a millisecond later at least: later in order
    for column in zip(*made, strict=True):
        assert _time_ordered(list(column)), column
