from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence

import pytest
import redis

from pigeon.jobs import outbox
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.relay import (
    CallablePublisher,
    Message,
    PartialPublish,
    RedisStreamPublisher,
    Relay,
)
from pigeon.jobs.stats import RelayLag, relay_lag
from pigeon.storage.base import Database
from tests.clocks import FakeClock


def _fill(db: Database, n: int, topic: str = "answers") -> list[str]:
    with db.transaction() as tx:
        return [outbox.add(tx, topic, {"n": i}) for i in range(n)]


class Crashy:
    """Publishes, then 'dies' before the relay can mark the row (on one chosen message)."""

    def __init__(self, die_on: int) -> None:
        self.seen: list[str] = []
        self.die_on = die_on

    def publish(self, message: Message) -> None:
        self.seen.append(message.id)
        if len(self.seen) == self.die_on:
            raise KeyboardInterrupt  # like a kill: not an Exception, nothing gets marked


def test_relay_resumes_after_being_killed_and_keeps_ids(db: Database) -> None:
    ids = _fill(db, 10)
    crashy = Crashy(die_on=4)
    with pytest.raises(KeyboardInterrupt):
        Relay(db, crashy).run_once()
    # the fourth was published but not marked: a new relay publishes it again, same id
    got: list[Message] = []
    assert Relay(db, CallablePublisher(got.append)).drain() == 7
    assert [m.id for m in got] == ids[3:]
    assert crashy.seen[-1] == got[0].id
    assert [m.payload for m in got] == [{"n": i} for i in range(3, 10)]


def test_failure_stops_in_order_and_is_recorded(db: Database) -> None:
    _fill(db, 3)
    calls: list[str] = []

    def flaky(message: Message) -> None:
        calls.append(message.id)
        if len(calls) == 2:
            raise ConnectionError("broker down")

    assert Relay(db, CallablePublisher(flaky)).run_once() == 1
    with db.transaction() as tx:
        pending = tx.fetchall("outbox_pending", {"limit": 10})
    assert len(pending) == 2 and pending[0]["attempts"] == 1


def test_purge_after_retention(db: Database, clock: FakeClock) -> None:
    _fill(db, 3)
    relay = Relay(db, CallablePublisher(lambda m: None), retention=60, clock=clock)
    relay.drain()
    assert relay.purge() == 0
    clock.advance(61)
    assert relay.purge(batch=2) == 3  # bounded batches still purge everything due
    with db.transaction() as tx:
        row = tx.fetchone("outbox_counts")
    assert row is not None and not row["published"]


@pytest.fixture
def redis_client() -> redis.Redis:
    client = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=5)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis not reachable on 127.0.0.1:6379: {exc}")
    return client


def test_redis_streams_publish_once_per_message_id(db: Database, redis_client: redis.Redis) -> None:
    prefix = f"pigeon-test-{uuid.uuid4().hex[:8]}:"
    ids = _fill(db, 5)
    publisher = RedisStreamPublisher(redis_client, prefix=prefix, dedup_seconds=60)
    try:
        with pytest.raises(KeyboardInterrupt):
            Relay(db, _KillAfter(publisher, 3)).run_once()
        assert Relay(db, publisher).drain() == 3  # message 3 is re-sent, then 4 and 5
        entries = redis_client.xrange(prefix + "answers")
        got = [fields[b"message_id"].decode() for _, fields in entries]
        assert got == ids  # the repeat of message 3 was dropped by Redis
        assert entries[0][1][b"payload"] == b'{"n":0}'
    finally:
        redis_client.delete(prefix + "answers", *[f"{prefix}seen:{i}" for i in ids])


class _KillAfter:
    def __init__(self, inner: RedisStreamPublisher, n: int) -> None:
        self.inner, self.n, self.count = inner, n, 0

    def publish(self, message: Message) -> None:
        self.inner.publish(message)
        self.count += 1
        if self.count == self.n:
            raise KeyboardInterrupt


class Partial:
    """A batch publisher that confirms only the first ``confirm`` messages of its next
    batch, then fails (a broker that went away mid-batch)."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.confirm: int | None = None

    def publish(self, message: Message) -> None:
        self.publish_many([message])

    def publish_many(self, messages: Sequence[Message]) -> int:
        ok = len(messages) if self.confirm is None else self.confirm
        self.held += [m.id for m in messages[:ok]]
        if ok < len(messages):
            self.confirm = None
            raise PartialPublish(ok, ConnectionError("broker gone"))
        return 0


def test_a_batch_cut_short_marks_only_the_confirmed_prefix_and_resumes_there(
    db: Database,
) -> None:
    ids = _fill(db, 10)
    publisher = Partial()
    publisher.confirm = 4
    relay = Relay(db, publisher, batch=6)
    assert relay.run_once() == 4 and isinstance(relay.last_error, ConnectionError)
    assert relay_lag(db).pending == 6
    assert relay.drain() == 6 and relay.last_error is None
    assert publisher.held == ids  # nothing lost, nothing twice, in order
    assert relay.counts.failures == 1 and relay.counts.published == 10


def test_run_backs_off_while_the_broker_refuses_and_keeps_the_order(db: Database) -> None:
    ids = _fill(db, 5)
    got: list[str] = []
    refusals = [3]

    def flaky(message: Message) -> None:
        if refusals[0] > 0:
            refusals[0] -= 1
            raise ConnectionError("broker down")
        got.append(message.id)

    relay = Relay(db, CallablePublisher(flaky), backoff=Backoff(base=0.01, cap=0.02))
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,), kwargs={"interval": 0.01})
    thread.start()
    deadline = time.monotonic() + 10
    while relay_lag(db).pending and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert got == ids and relay.counts.failures == 3


def test_relay_lag_counts_unpublished_rows_and_ages_the_oldest(
    db: Database, clock: FakeClock
) -> None:
    assert relay_lag(db, now=clock()) == RelayLag(0, None)
    with db.transaction() as tx:
        outbox.add(tx, "answers", {"n": 1}, now=clock())
        clock.advance(30)
        outbox.add(tx, "answers", {"n": 2}, now=clock())
    clock.advance(12)
    lag = relay_lag(db, now=clock())
    assert lag == RelayLag(2, 42.0) and lag.as_dict() == {"pending": 2, "oldest_age": 42.0}
    Relay(db, CallablePublisher(lambda m: None), batch=1).run_once()
    assert relay_lag(db, now=clock()) == RelayLag(1, 12.0)
