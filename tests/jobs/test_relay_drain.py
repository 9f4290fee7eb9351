"""The relay drained (``pigeon relay`` on SIGTERM, ``RelayRunner.stop()``): a stop that
lands in the middle of a batch lets that batch finish, every row of it published and
marked, and starts no other; the next relay begins at the first row left."""

from __future__ import annotations

import threading

from pigeon.jobs import outbox
from pigeon.jobs.relay import CallablePublisher, Message, Relay
from pigeon.jobs.stats import relay_lag
from pigeon.storage.base import Database

BATCH = 10


def test_a_stop_mid_batch_finishes_that_batch_and_starts_no_other(db: Database) -> None:
    with db.transaction() as tx:
        ids = [outbox.add(tx, "answers", {"n": i}) for i in range(3 * BATCH)]
    got: list[str] = []
    stop = threading.Event()

    def publish(message: Message) -> None:
        got.append(message.id)
        if len(got) == BATCH + 3:  # the second batch is under way: SIGTERM now
            stop.set()

    relay = Relay(db, CallablePublisher(publish), batch=BATCH)
    thread = threading.Thread(target=relay.run, args=(stop,), kwargs={"interval": 0.01})
    thread.start()
    thread.join(10)
    alive = thread.is_alive()
    stop.set()  # a relay still running would outlive the test (and hold up the process)
    thread.join(10)
    assert not alive
    assert got == ids[: 2 * BATCH]  # the batch in progress went out whole, in order
    assert relay_lag(db).pending == BATCH  # each of them marked; the third never began
    rest: list[str] = []
    assert Relay(db, CallablePublisher(lambda m: rest.append(m.id))).drain() == BATCH
    assert rest == ids[2 * BATCH :]
