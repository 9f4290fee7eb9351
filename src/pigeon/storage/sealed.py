"""The columns sealed at rest on the server (`pigeon.storage.crypto`), in one place: the
code that writes and reads each one binds its ciphertext to the same row columns listed
here, and ``pigeon keys rotate`` / ``status`` walk exactly these.

Associated data is ``(table, column, *values of bound columns)``: a ciphertext copied to
another row (another principal's note, another job) or another column fails to open.
A job's payload is bound to its task, not its id: the id is allocated by the insert that
writes the payload (one statement, no second round trip to learn it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SealedColumn:
    table: str
    column: str
    key: tuple[str, ...]  # the primary key: how rotation walks and addresses rows
    bound: tuple[str, ...]  # the row's columns its ciphertext is bound to
    # The table's name in the associated data, when it differs from its name now: a
    # renamed table (pigeon_ / ref_ prefixes) keeps the name its values were sealed under,
    # so they still open.
    sealed_as: str | None = None

    @property
    def ad(self) -> tuple[str, str]:
        return (self.sealed_as or self.table, self.column)

    def ad_of(self, row: Mapping[str, Any]) -> tuple[str, ...]:
        return (*self.ad, *(str(row[c]) for c in self.bound))

    @property
    def name(self) -> str:
        return f"{self.table}.{self.column}"


RESPONSE_BODY = SealedColumn(
    "pigeon_idempotency_claims",
    "response_body",
    ("principal", "idem_key"),
    ("principal", "idem_key"),
    sealed_as="idempotency_claims",
)
NOTE_DATA = SealedColumn(
    "ref_notes", "data", ("principal", "id"), ("principal", "id"), sealed_as="notes"
)
RECORD_DATA = SealedColumn("pigeon_records", "data", ("id",), ("id",))
EVENT_DETAIL = SealedColumn("pigeon_record_events", "detail", ("id",), ("record_id",))
JOB_PAYLOAD = SealedColumn("pigeon_jobs", "payload", ("id",), ("task",))
JOB_ERROR = SealedColumn("pigeon_jobs", "last_error", ("id",), ("id",))
ATTEMPT_ERROR = SealedColumn(
    "pigeon_job_attempts", "error", ("job_id", "attempt"), ("job_id", "attempt")
)
OUTBOX_PAYLOAD = SealedColumn("pigeon_outbox", "payload", ("id",), ("message_id",))
EFFECT_RESULT = SealedColumn("pigeon_effects", "result", ("scope", "key"), ("scope", "key"))
PROVIDER_REQUEST = SealedColumn("pigeon_provider_calls", "request", ("reference",), ("reference",))
PROVIDER_RESULT = SealedColumn("pigeon_provider_calls", "result", ("reference",), ("reference",))

SERVER_COLUMNS = (
    RESPONSE_BODY,
    NOTE_DATA,
    RECORD_DATA,
    EVENT_DETAIL,
    JOB_PAYLOAD,
    JOB_ERROR,
    ATTEMPT_ERROR,
    OUTBOX_PAYLOAD,
    EFFECT_RESULT,
    PROVIDER_REQUEST,
    PROVIDER_RESULT,
)
