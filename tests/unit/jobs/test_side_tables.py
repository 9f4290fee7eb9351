"""The jobs store's tables beside the jobs' life cycle, through the modules that use them
(effects, provider calls, revoked principals and the access re-check), on the in-memory,
SQLite and PostgreSQL stores alike."""

from __future__ import annotations

from typing import Any

import pytest

from pigeon.exceptions import AccessRevoked, InvalidOperation, PermanentError
from pigeon.jobs import access, records
from pigeon.jobs.app import App
from pigeon.jobs.effects import applied, effect, effect_result
from pigeon.jobs.job import Job, JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.providers import call_provider, provider_call
from pigeon.jobs.stores import BuiltinStore
from tests.clocks import FakeClock


def test_an_effect_runs_once_and_a_failed_one_leaves_no_claim(any_store: BuiltinStore) -> None:
    calls: list[int] = []

    def mutation(tx: object) -> dict[str, int]:
        calls.append(1)
        return {"total": 7}

    assert effect(any_store, "grade", "a1", mutation) == {"total": 7}
    assert effect(any_store, "grade", "a1", mutation) == {"total": 7}  # the stored result
    assert calls == [1] and applied(any_store, "grade", "a1")
    with any_store.reading() as session:  # what a reader of the result sees, in its own tx
        assert effect_result(session.tx, "grade", "a1") == {"total": 7}
        assert effect_result(session.tx, "grade", "a2") is None

    def broken(tx: object) -> None:
        raise RuntimeError("half-way")

    with pytest.raises(RuntimeError):
        effect(any_store, "grade", "a2", broken)
    assert not applied(any_store, "grade", "a2")  # rolled back with the transaction
    with pytest.raises(InvalidOperation, match="scope and a key"):
        effect(any_store, "", "k", mutation)


class Bank:
    """Applies the charge; the first answer is lost on the way back."""

    name = "bank"

    def __init__(self) -> None:
        self.charges: dict[str, str] = {}  # idempotency key -> reference
        self.dropped = False

    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        self.charges.setdefault(idempotency_key, reference)
        if not self.dropped:
            self.dropped = True
            raise TimeoutError("read timed out")
        return {"charge": idempotency_key}

    def lookup(self, reference: str) -> Any | None:
        keys = [k for k, ref in self.charges.items() if ref == reference]
        return {"charge": keys[0]} if keys else None


class Refusing(Bank):
    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        raise PermanentError("card declined")


def test_a_provider_call_is_reconciled_and_recorded(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    with any_store.transaction() as session:
        rid = records.accept(
            session.tx, kind="order", data={}, obligations={"pay": JobSpec("p", "t")}
        )
    bank = Bank()
    result = call_provider(any_store, bank, "order:1", {"amount": 5}, record_id=rid, clock=clock)
    assert result == {"charge": next(iter(bank.charges))} and len(bank.charges) == 1
    stored = provider_call(any_store, "order:1")
    assert stored is not None
    assert (stored["status"], stored["attempts"], stored["request"]) == (
        "succeeded",
        1,
        {"amount": 5},
    )
    assert stored["result"] == result
    assert call_provider(any_store, bank, "order:1", {"amount": 5}) == result  # no new call
    (event,) = [e for e in records.get(any_store, rid)["events"] if e["state"] == "provider_result"]
    assert event["detail"]["via"] == "lookup"
    with pytest.raises(PermanentError, match="card declined"):
        call_provider(any_store, Refusing(), "order:2", {"amount": 1})
    with pytest.raises(PermanentError, match="refused order:2"):  # remembered, not re-called
        call_provider(any_store, Refusing(), "order:2", {"amount": 1})
    assert provider_call(any_store, "order:3") is None


def test_the_access_re_check_reads_the_revoked_principals(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    app = App()
    app.queue("q")

    def still_allowed(tx: Any, job: Job) -> str | None:
        return access.revoked(tx, job.payload["principal"])

    app.task(lambda **_: None, queue="q", name="t", access=still_allowed)
    m = JobManager(any_store, app, clock=clock)
    m.enqueue(JobSpec("q", "t", {"principal": "eve"}))
    with any_store.transaction() as session:
        access.revoke(session.tx, "eve", reason="account closed", now=clock())
        with pytest.raises(InvalidOperation, match="needs a reason"):
            access.revoke(session.tx, "eve", reason=" ")
    (job,) = m.lease_jobs("q", "w", 1, lease=60)
    with pytest.raises(AccessRevoked, match="account closed"):
        app.tasks["t"].before_run(any_store, job)
    with any_store.transaction() as session:
        access.restore(session.tx, "eve")
        assert access.revoked(session.tx, "eve") is None
    app.tasks["t"].before_run(any_store, job)  # allowed again
    assert m.finish([AttemptOutcome(job)]) == [True]
