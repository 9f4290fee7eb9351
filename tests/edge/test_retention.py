"""Retention of delivered operations: purged by the queue itself after ``keep_delivered``,
a bounded number at a time, never anything undelivered, never letting the clock go back."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.core.clock import HLCTimestamp
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.retention import PurgeSchedule
from pigeon.exceptions import ConfigurationError, NotFound
from tests.clocks import FakeClock

DAY = 86400.0


def _deliver(queue: OfflineQueue, *entities: str) -> list[str]:
    ops = [queue.enqueue("update", entity, {"v": 1}) for entity in entities]
    taken = {op.id for op in queue.next_batch(len(ops))}
    assert taken == {op.id for op in ops}
    queue.mark_delivered_many([(op.id, None, None) for op in ops])
    return [op.id for op in ops]


def test_delivered_operations_go_after_keep_delivered_and_nothing_else_does(
    tmp_path: Path, clock: FakeClock
) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(keep_delivered=DAY), now=clock) as queue:
        old = _deliver(queue, "note:1")  # the first delivery of the process purges: none due
        queue.enqueue("update", "note:2", {"v": 1})  # stays pending for ever
        dead = queue.enqueue("update", "note:3", {"v": 1})
        queue.next_batch(10)
        queue.mark_failed(dead.id, "no", kind="permanent")
        clock.advance(DAY / 2)
        recent = _deliver(queue, "note:4")  # purges, but nothing is a day old yet
        clock.advance(DAY / 2 + 1)
        _deliver(queue, "note:5")  # due: note:1 is a day and a second old
        with pytest.raises(NotFound):
            queue.get(old[0])
        assert queue.get(recent[0]).status == "delivered"
        stats = queue.stats()
        assert (stats.delivered, stats.depth, stats.dead) == (2, 1, 1)


def test_none_keeps_everything_until_purge_delivered(tmp_path: Path, clock: FakeClock) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(keep_delivered=None), now=clock) as queue:
        _deliver(queue, "note:1")
        clock.advance(365 * DAY)
        _deliver(queue, "note:2")
        assert queue.stats().delivered == 2
        assert queue.purge_delivered(older_than=DAY) == 1
        assert queue.stats().delivered == 1


def test_a_backlog_goes_in_bounded_purges_one_delivery_after_another(
    tmp_path: Path, clock: FakeClock
) -> None:
    with OfflineQueue(tmp_path / "q.db", QueueOptions(keep_delivered=DAY), now=clock) as queue:
        queue._purges = PurgeSchedule(every=60.0, batch=3)
        _deliver(queue, *[f"note:{i}" for i in range(8)])
        clock.advance(2 * DAY)
        counts = []
        for i in range(4):  # each delivery runs one purge of at most 3 while they come full
            _deliver(queue, f"fresh:{i}")
            counts.append(queue.stats().delivered - (i + 1))
        assert counts == [5, 2, 0, 0]


def test_purging_the_newest_rows_never_lets_the_clock_go_back(tmp_path: Path) -> None:
    """No close() (the app was killed), then a device clock set back a day: the next stamp
    is still above the purged ones, which the state row kept."""
    path = tmp_path / "q.db"
    clock = FakeClock(10 * DAY)
    first = OfflineQueue(path, QueueOptions(keep_delivered=0), now=clock)
    _deliver(first, "note:1")  # purged at once, by the next delivery's purge
    clock.advance(61)
    _deliver(first, "note:2")
    newest = first.operations(limit=10)
    assert len(newest) == 1  # note:1 went; note:2 is the newest stamp left ...
    clock.advance(61)
    top = newest[0].clock
    first.purge_delivered(older_than=0)  # ... and goes too
    assert first.operations(limit=10) == []
    first._store.close()  # no close(): nothing saved on the way out
    back = FakeClock(9 * DAY)
    with OfflineQueue(path, now=back) as second:
        made = second.enqueue("update", "note:3", {"v": 1})
    assert HLCTimestamp.decode(made.clock) > HLCTimestamp.decode(top)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1d", True])
def test_bad_retention_is_refused_by_name(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigurationError, match="keep_delivered"):
        OfflineQueue(tmp_path / "q.db", QueueOptions(keep_delivered=bad))  # type: ignore[arg-type]
    with (
        OfflineQueue(tmp_path / "q.db") as queue,
        pytest.raises(ConfigurationError, match="older_than"),
    ):
        queue.purge_delivered(bad)  # type: ignore[arg-type]


# Events: (seconds later, rows the purge would find).
events = st.lists(st.tuples(st.floats(0, 200), st.integers(0, 10)), max_size=60)


@given(events=events)
def test_schedule_purges_at_most_once_a_minute_unless_the_last_came_back_full(
    events: list[tuple[float, int]],
) -> None:
    schedule = PurgeSchedule(every=60.0, batch=5)
    now, last, last_full = 0.0, None, False
    for later, due in events:
        now += later
        if schedule.claim(now):
            if last is not None and not last_full:
                # last + 60 <= now, not now - last >= 60: the two differ by a rounding
                # (hypothesis found 128.870406879707 - 68.870406879707 < 60.0).
                assert now >= last + 60.0
            purged = min(due, schedule.batch)
            schedule.done(now, purged)
            last, last_full = now, purged >= schedule.batch
        else:
            assert last is not None and not last_full and now < last + 60.0
