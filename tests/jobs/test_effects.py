from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pigeon.exceptions import InvalidOperation, PermanentError, RetryableError
from pigeon.jobs import records
from pigeon.jobs.effects import applied, effect, effect_in
from pigeon.jobs.job import JobSpec
from pigeon.jobs.providers import call_provider, provider_call
from pigeon.storage.base import Database, Tx


def test_effect_runs_once_and_replays_its_result(db: Database) -> None:
    calls: list[int] = []

    def mutation(tx: Tx) -> dict[str, int]:
        calls.append(1)
        return {"score": 90}

    assert effect(db, "grade", "answer:1", mutation) == {"score": 90}
    assert effect(db, "grade", "answer:1", mutation) == {"score": 90}
    assert effect(db, "grade", "answer:2", mutation) == {"score": 90}
    assert len(calls) == 2 and applied(db, "grade", "answer:1")


def test_failed_mutation_leaves_no_claim(db: Database) -> None:
    def broken(tx: Tx) -> None:
        raise RuntimeError("half-way")

    with pytest.raises(RuntimeError):
        effect(db, "grade", "k", broken)
    assert not applied(db, "grade", "k")
    assert effect(db, "grade", "k", lambda tx: 1) == 1


def test_concurrent_workers_apply_once(db: Database) -> None:
    calls: list[int] = []
    results: list[object] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def slow_mutation(tx: Tx) -> int:
        calls.append(1)
        time.sleep(0.05)  # hold the claim while the twins arrive: a wide race window
        return len(calls)

    def run() -> None:
        barrier.wait()
        try:
            results.append(effect(db, "pay", "order:9", slow_mutation))
        except BaseException as exc:  # a twin that raised would be a lost result
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert calls == [1]
    assert results == [1] * 8


def test_effect_in_a_caller_transaction_rolls_its_claim_back_with_the_mutation(
    db: Database,
) -> None:
    def broken(tx: Tx) -> None:
        raise RuntimeError("half-way")

    with db.transaction() as tx:
        with pytest.raises(RuntimeError):
            effect_in(tx, "grade", "k", broken, now=1.0)
        assert effect_in(tx, "grade", "other", lambda tx: 2, now=1.0) == 2
    assert not applied(db, "grade", "k") and applied(db, "grade", "other")


def test_effect_needs_scope_and_key(db: Database) -> None:
    with pytest.raises(InvalidOperation, match="scope and a key"):
        effect(db, "", "k", lambda tx: None)


class FlakyBank:
    """Applies the charge, then the connection drops before the answer comes back."""

    name = "bank"

    def __init__(self, drop_after_apply: int = 1) -> None:
        self.charges: dict[str, dict[str, Any]] = {}  # by idempotency key
        self.keys_seen: list[str] = []
        self.drops = drop_after_apply

    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        self.keys_seen.append(idempotency_key)
        if idempotency_key not in self.charges:
            self.charges[idempotency_key] = {"reference": reference, "amount": request["amount"]}
        if self.drops:
            self.drops -= 1
            raise TimeoutError("read timed out")
        return {"charge": idempotency_key}

    def lookup(self, reference: str) -> Any | None:
        for key, charge in self.charges.items():
            if charge["reference"] == reference:
                return {"charge": key}
        return None


def test_unknown_outcome_is_reconciled_by_lookup_never_a_new_key(db: Database) -> None:
    bank = FlakyBank()
    with db.transaction() as tx:
        rid = records.accept(tx, kind="order", data={}, obligations={"pay": JobSpec("p", "pay")})
    result = call_provider(db, bank, "order:1", {"amount": 5}, record_id=rid, obligation="pay")
    assert len(bank.charges) == 1 and len(bank.keys_seen) == 1
    assert result == {"charge": bank.keys_seen[0]}
    stored = provider_call(db, "order:1")
    assert stored is not None and stored["status"] == "succeeded"
    assert stored["idempotency_key"] == bank.keys_seen[0]
    # a re-run (say the job crashed before finishing) finds the stored result
    assert call_provider(db, bank, "order:1", {"amount": 5}) == result
    assert len(bank.keys_seen) == 1
    (event,) = [e for e in records.get(db, rid)["events"] if e["state"] == "provider_result"]
    assert event["detail"]["via"] == "lookup" and event["obligation"] == "pay"


class BlackHole(FlakyBank):
    """Times out before applying anything, twice; then works."""

    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        self.keys_seen.append(idempotency_key)
        if self.drops:
            self.drops -= 1
            raise TimeoutError("connect timed out")
        self.charges[idempotency_key] = {"reference": reference, "amount": request["amount"]}
        return {"charge": idempotency_key}


def test_not_applied_retries_with_the_same_key(db: Database) -> None:
    bank = BlackHole(drop_after_apply=2)
    for _ in range(2):
        with pytest.raises(RetryableError, match="same key"):
            call_provider(db, bank, "order:2", {"amount": 7})
    call_provider(db, bank, "order:2", {"amount": 7})
    assert len(set(bank.keys_seen)) == 1 and len(bank.charges) == 1


class Refusing(FlakyBank):
    def call(self, reference: str, idempotency_key: str, request: Any) -> Any:
        raise PermanentError("card declined")


def test_permanent_refusal_is_stored(db: Database) -> None:
    with pytest.raises(PermanentError):
        call_provider(db, Refusing(), "order:3", {"amount": 1})
    with pytest.raises(PermanentError, match="card declined"):
        call_provider(db, Refusing(), "order:3", {"amount": 1})
