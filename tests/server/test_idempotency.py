"""The claim store: the pure decision table and the SQL behind it, on a real SQLite file."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError
from pigeon.server.idempotency import (
    DAY,
    ClaimOutcome,
    IdempotencyPolicy,
    SqlIdempotencyStore,
    StoredResponse,
    decide_claim,
)
from pigeon.server.intake import Intake
from pigeon.server.options import IntakeOptions
from pigeon.storage.base import Database
from tests.clocks import FakeClock

from .conftest import CountingDatabase

times = st.floats(min_value=0, max_value=1e7, allow_nan=False)


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "fingerprint": "f",
        "state": "completed",
        "locked_until": None,
        "response_body": "{}",
        "response_expires_at": 100.0,
        "claim_expires_at": 1000.0,
    }
    return row | overrides


@given(times)
def test_a_live_claim_with_another_fingerprint_is_a_mismatch(now: float) -> None:
    outcome = decide_claim(_row(claim_expires_at=now + 1), "other", now)
    assert outcome is ClaimOutcome.MISMATCH


@given(times, times)
def test_completed_claims_replay_until_the_response_expires_then_say_already_applied(
    now: float, response_expires_at: float
) -> None:
    row = _row(response_expires_at=response_expires_at, claim_expires_at=max(now, 0) + 1)
    expected = ClaimOutcome.REPLAY if response_expires_at > now else ClaimOutcome.ALREADY_APPLIED
    assert decide_claim(row, "f", now) is expected


@given(times, times)
def test_in_progress_is_honoured_until_the_lock_expires(now: float, locked_until: float) -> None:
    row = _row(state="in_progress", locked_until=locked_until, claim_expires_at=now + 1)
    expected = ClaimOutcome.IN_PROGRESS if locked_until > now else ClaimOutcome.TAKE_OVER
    assert decide_claim(row, "f", now) is expected


@given(times, st.sampled_from(["f", "other"]), st.sampled_from(["in_progress", "completed"]))
def test_an_expired_claim_never_blocks_and_never_replays(now: float, fp: str, state: str) -> None:
    row = _row(state=state, locked_until=now + 50, claim_expires_at=now)
    assert decide_claim(row, fp, now) is ClaimOutcome.TAKE_OVER


def test_policy_values_must_be_in_order() -> None:
    with pytest.raises(ConfigurationError, match="response_retention"):
        IdempotencyPolicy(response_retention=10 * DAY, claim_retention=DAY)
    with pytest.raises(ConfigurationError, match="lock_timeout"):
        IdempotencyPolicy(lock_timeout=0)


def _claim(store: SqlIdempotencyStore, notes_db: Database, fp: str = "f", key: str = "k") -> Any:
    with notes_db.transaction() as tx:
        return store.claim(
            tx, principal="p", key=key, fingerprint=fp, method="POST", path="/x", operation_id="op"
        )


def test_claim_complete_replay_purge_lifecycle(notes_db: Database, server_clock: FakeClock) -> None:
    policy = IdempotencyPolicy(lock_timeout=30, response_retention=DAY, claim_retention=7 * DAY)
    store = SqlIdempotencyStore(policy, now=server_clock)
    first = _claim(store, notes_db)
    assert first.outcome is ClaimOutcome.FRESH and first.claim is not None
    assert _claim(store, notes_db).outcome is ClaimOutcome.IN_PROGRESS  # committed claim, lock held
    with notes_db.transaction() as tx:
        assert store.complete(tx, first.claim, StoredResponse(201, '{"a":1}'))
    replay = _claim(store, notes_db)
    assert replay.outcome is ClaimOutcome.REPLAY
    assert replay.response == StoredResponse(201, '{"a":1}')
    assert _claim(store, notes_db, fp="other").outcome is ClaimOutcome.MISMATCH

    server_clock.advance(DAY + 1)  # response expired: decided by time, before any purge ran
    gone = _claim(store, notes_db)
    assert (gone.outcome, gone.operation_id, gone.original_status) == (
        ClaimOutcome.ALREADY_APPLIED,
        "op",
        201,
    )
    with notes_db.transaction() as tx:
        assert store.purge(tx) == (1, 0)
        row = store.get(tx, "p", "k")
    assert row is not None and row["response_body"] is None

    server_clock.advance(6 * DAY)  # the claim itself expired: the key is free again
    with notes_db.transaction() as tx:
        assert store.purge(tx) == (0, 1)
    assert _claim(store, notes_db).outcome is ClaimOutcome.FRESH


def test_an_orphaned_claim_is_taken_over_after_the_lock_timeout_and_fenced(
    notes_db: Database, server_clock: FakeClock
) -> None:
    store = SqlIdempotencyStore(IdempotencyPolicy(lock_timeout=30), now=server_clock)
    orphan = _claim(store, notes_db).claim
    server_clock.advance(29)
    assert _claim(store, notes_db).outcome is ClaimOutcome.IN_PROGRESS
    server_clock.advance(2)
    taker = _claim(store, notes_db)
    assert taker.outcome is ClaimOutcome.TAKE_OVER
    with notes_db.transaction() as tx:
        # The first holder woke up: its token no longer matches, it may not complete.
        assert not store.fence(tx, orphan)
        assert not store.complete(tx, orphan, StoredResponse(200, "{}"))
        assert store.complete(tx, taker.claim, StoredResponse(200, '"taker"'))
    assert _claim(store, notes_db).response == StoredResponse(200, '"taker"')


def test_release_frees_the_key_for_a_retry(notes_db: Database, server_clock: FakeClock) -> None:
    store = SqlIdempotencyStore(now=server_clock)
    first = _claim(store, notes_db)
    with notes_db.transaction() as tx:
        assert store.release(tx, first.claim)
        assert store.stats(tx)["claims"] == 0
    assert _claim(store, notes_db).outcome is ClaimOutcome.FRESH


def test_keys_are_scoped_by_principal(notes_db: Database, server_clock: FakeClock) -> None:
    store = SqlIdempotencyStore(now=server_clock)
    with notes_db.transaction() as tx:
        a = store.claim(
            tx, principal="a", key="k", fingerprint="1", method="POST", path="/", operation_id="x"
        )
        b = store.claim(
            tx, principal="b", key="k", fingerprint="2", method="POST", path="/", operation_id="y"
        )
    assert a.outcome is ClaimOutcome.FRESH and b.outcome is ClaimOutcome.FRESH


def test_purge_is_bounded_per_transaction_on_every_backend(
    notes_db: Database, server_clock: FakeClock
) -> None:
    policy = IdempotencyPolicy(response_retention=DAY, claim_retention=2 * DAY)
    store = SqlIdempotencyStore(policy, now=server_clock)
    with notes_db.transaction() as tx:
        for i in range(12):
            claim = store.claim(
                tx,
                principal="p",
                key=f"k{i}",
                fingerprint="f",
                method="POST",
                path="/x",
                operation_id=f"op{i}",
            ).claim
            assert claim is not None and store.complete(tx, claim, StoredResponse(201, "{}"))
            server_clock.advance(1)  # k0 expires first
    server_clock.advance(DAY)
    with notes_db.transaction() as tx:
        assert store.purge(tx, limit=5) == (5, 0)
        rows = [store.get(tx, "p", f"k{i}") for i in range(12)]
    # The oldest five went first; a purged row leaves the expiry range (no rescans).
    assert [r is not None and r["response_body"] is None for r in rows] == [True] * 5 + [False] * 7
    assert all(r is not None and r["response_expires_at"] is None for r in rows[:5])
    assert _claim(store, notes_db, key="k0").outcome is ClaimOutcome.ALREADY_APPLIED

    counted = CountingDatabase(notes_db)
    intake = Intake(counted, IntakeOptions(policy), now=server_clock)
    assert intake.purge(batch=5) == (7, 0)
    assert counted.commits == 2  # 5 + 2, one short transaction each
    server_clock.advance(DAY)
    counted.commits = 0
    assert intake.purge(batch=5) == (0, 12)
    assert counted.commits == 3  # 5 + 5 + 2
    with notes_db.transaction() as tx:
        assert store.stats(tx)["claims"] == 0


def test_lock_tokens_are_unique_and_a_forked_child_never_repeats_its_parents() -> None:
    import os

    from pigeon.server.idempotency import _tokens

    made = {_tokens.next() for _ in range(10_000)}
    assert len(made) == 10_000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next token and leave at once
        os.write(write, _tokens.next().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 200).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = _tokens.next()
    assert child not in made and child != parent
    assert child[:24] != parent[:24], "the child drew a prefix of its own"
