"""When to sync next (pure rule, properties), the wake-up flag, and connectivity monitors."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

from hypothesis import given
from hypothesis import strategies as st

from pigeon.core.retry import RetryPolicy
from pigeon.sync.connectivity import ConnectivityMonitor, ManualMonitor, ProbeMonitor
from pigeon.sync.events import CycleReport
from pigeon.sync.scheduler import Waker, wait_time

times = st.floats(min_value=0, max_value=1e9, allow_nan=False)


@given(
    now=times,
    next_due=st.none() | times,
    paused=st.booleans(),
    online=st.booleans(),
    unreachable_until=times,
    idle=st.floats(min_value=0.001, max_value=10),
    window=st.floats(min_value=0, max_value=0.1),
)
def test_wait_time_properties(
    now: float,
    next_due: float | None,
    paused: bool,
    online: bool,
    unreachable_until: float,
    idle: float,
    window: float,
) -> None:
    wait = wait_time(
        now=now,
        next_due=next_due,
        paused=paused,
        online=online,
        unreachable_until=unreachable_until,
        idle_recheck=idle,
        batch_window=window,
    )
    if paused or not online:
        assert wait is None  # only an event (resume, connectivity) can help
        return
    if unreachable_until > now:
        assert wait == unreachable_until - now
        return
    if next_due is None:
        assert wait is None
    elif next_due <= now:
        assert wait == idle  # due but held behind its entity: never a busy loop
    else:
        assert wait is not None and wait >= next_due - now  # never early for a timer
        assert wait <= next_due - now + window + 1e-6


def test_waker_thread_and_async() -> None:
    waker = Waker()
    assert waker.wait(0.01) is False
    threading.Timer(0.05, waker.set).start()
    assert waker.wait(5) is True
    waker.clear()

    async def main() -> tuple[bool, bool]:
        waker.bind()
        timed_out = await waker.wait_async(0.01)
        threading.Timer(0.05, waker.set).start()  # from another thread
        woken = await waker.wait_async(5)
        waker.unbind()
        return timed_out, woken

    assert asyncio.run(main()) == (False, True)


def test_manual_monitor_tells_listeners_only_on_change() -> None:
    monitor = ManualMonitor(online=True)
    assert isinstance(monitor, ConnectivityMonitor)
    seen: list[bool] = []
    monitor.subscribe(seen.append)
    monitor.set_online(True)
    monitor.report_unreachable()  # the app's word stands; the engine backs off alone
    monitor.set_online(False)
    monitor.set_online(True)
    assert seen == [False, True] and monitor.online


def test_probe_monitor_backs_off_until_the_server_answers() -> None:
    answers = iter([False, False, False, True])
    stamps: list[float] = []

    def probe() -> bool:
        stamps.append(time.monotonic())
        return next(answers)

    monitor = ProbeMonitor(probe, backoff=RetryPolicy(base=0.05, factor=2, cap=1.0))
    back = threading.Event()
    monitor.subscribe(lambda online: online and back.set())
    monitor.start()
    try:
        time.sleep(0.05)
        assert stamps == []  # online: no probing at all
        monitor.report_unreachable()
        assert not monitor.online
        assert back.wait(5)
    finally:
        monitor.stop()
    assert monitor.online and monitor.probes == 4
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(gap <= 0.05 * 2**i + 0.3 for i, gap in enumerate(gaps))


def test_probe_monitor_survives_a_raising_probe() -> None:
    calls = iter([RuntimeError("boom"), True])

    def probe() -> bool:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    monitor = ProbeMonitor(probe, backoff=RetryPolicy(base=0.01, cap=0.02), online=False)
    monitor.start()
    try:
        deadline = time.monotonic() + 5
        while not monitor.online and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        monitor.stop()
    assert monitor.online and monitor.probes == 2


def test_cycle_report_sums_counters() -> None:
    total = CycleReport()
    total.add(CycleReport(taken=3, delivered=2, released=1, paused="401", unreachable=True))
    total.add(CycleReport(taken=1, dead=1))
    assert (total.taken, total.delivered, total.dead, total.released) == (4, 2, 1, 1)
    assert total.sent == 3 and total.paused is None and not total.unreachable


def test_a_listener_may_stop_the_probe_monitor_that_calls_it() -> None:
    # Listeners run on the probe thread: stop() joined that very thread and raised
    # RuntimeError into the listener (logged as a listener error, the rest of it skipped).
    monitor = ProbeMonitor(lambda: True, online=False)
    done: list[str] = []

    def listener(online: bool) -> None:
        monitor.stop()
        done.append("stopped")

    monitor.subscribe(listener)
    monitor.start()
    deadline = time.monotonic() + 5
    while not done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == ["stopped"] and monitor.online
    monitor.stop()
