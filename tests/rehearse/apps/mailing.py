"""The reference jobs with a notification sent through a provider: a stand-in mail
service that records each message it applied in the table ``fake_mail`` of the server
database (named by ``FAKE_MAIL_DB``), dedups on the idempotency key and answers
``lookup``. ``hooks`` tells the rehearsal about both."""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
from pigeon.reference.jobs import FIELDS, GRADE_SCOPE, author_has_access, grade_key
from pigeon.rehearse import RehearsalHooks

DB_ENV = "FAKE_MAIL_DB"
_TABLE = "CREATE TABLE IF NOT EXISTS fake_mail (key TEXT PRIMARY KEY, reference TEXT, at REAL)"


def _connect() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ[DB_ENV], timeout=30, isolation_level=None)
    conn.execute(_TABLE)
    return conn


class FakeMail:
    """A provider that dedups on the key and finds what it sent by reference."""

    name = "fake-mail"

    def key_for(self, idempotency_key: str) -> str:
        return idempotency_key

    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        conn = _connect()
        try:
            conn.execute(
                "INSERT OR IGNORE INTO fake_mail VALUES (?, ?, ?)",
                (self.key_for(idempotency_key), reference, time.time()),
            )
        finally:
            conn.close()
        return {"sent": reference}

    def lookup(self, reference: str) -> Any | None:
        conn = _connect()
        try:
            row = conn.execute(
                "SELECT 1 FROM fake_mail WHERE reference = ?", (reference,)
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else {"sent": reference}


class ForgetfulMail(FakeMail):
    """The broken adapter: a new key for every call and a lookup that never finds."""

    def key_for(self, idempotency_key: str) -> str:
        return uuid.uuid4().hex

    def lookup(self, reference: str) -> Any | None:
        return None


MAIL = FakeMail()
FORGETFUL = ForgetfulMail()
app = App(default_owner="operations")
app.queue("grading", max_workers=8, owner="grading-team")
app.queue("notify", max_workers=8, owner="comms-team")
hooks = RehearsalHooks(tables=("fake_mail",), providers=("tests.rehearse.apps.mailing:MAIL",))
forgetful_hooks = RehearsalHooks(
    tables=("fake_mail",), providers=("tests.rehearse.apps.mailing:FORGETFUL",)
)


def provider() -> FakeMail:
    return FORGETFUL if os.environ.get("FAKE_MAIL_FORGETFUL") == "1" else MAIL


@app.task(queue="grading", context=True, fields=FIELDS, access=author_has_access)
def grade(ctx: JobContext, answer_id: str) -> None:
    ctx.effect(
        grade_key(answer_id), lambda tx: {"answer_id": answer_id, "score": 0}, scope=GRADE_SCOPE
    )


@app.task(queue="notify", context=True, fields=FIELDS, access=author_has_access)
def send(ctx: JobContext, answer_id: str) -> None:
    ctx.call_provider(provider(), f"notify:{answer_id}", {"answer_id": answer_id})
