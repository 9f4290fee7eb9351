"""The cycles of one `SyncEngine`: lanes side by side, each taking a batch, sending it and
settling it (`Executor.run_pass`) until nothing is due, and what each cycle did, summed
into the engine's totals and told to its holds (an unreachable server, a 429) and its
connectivity monitor. ``pipeline`` batches may be on the way at once; with more than one,
the engine runs one lane more, which takes its batch while they are on the way. A lane
takes its next batch in the transaction that settles its last, when nothing stands in the
way (`Lanes._goes_on`): one commit and one fsync of the queue a batch, not two.

One sync, read top to bottom: `Lanes.run` starts the other lanes and runs cycles one after
another (the cycle itself inline: a turn, the executor's pass, the accounting);
`Executor.run_pass` is one pass. From the engine: ``flush -> _flush -> Lanes.run ->
Executor.run_pass``, and the background loop's ``_step -> Lanes.run -> Executor.run_pass``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from pigeon.core.operation import Operation
from pigeon.logs import failure
from pigeon.sync.connectivity import ConnectivityMonitor
from pigeon.sync.events import CycleReport, ErrorCallback
from pigeon.sync.executor import Clock, Executor, SyncQueue
from pigeon.sync.holds import Holds
from pigeon.sync.resolver import Sweep
from pigeon.sync.scheduler import Cycles

log = logging.getLogger("pigeon.sync")


class Lanes:
    def __init__(
        self,
        queue: SyncQueue,
        executor: Executor,
        *,
        cycle_size: int,
        pipeline: int,
        connectivity: ConnectivityMonitor,
        holds: Holds,
        cycles: Cycles,
        sweeper: Sweep,
        stopping: threading.Event,
        clock: Clock,
        on_error: ErrorCallback,
    ) -> None:
        self.queue = queue
        self.executor = executor
        self.cycle_size = cycle_size
        self.connectivity = connectivity
        self.totals = CycleReport()  # everything done so far (counters only)
        # With more than one batch on the way, one more lane takes and prepares its batch
        # meanwhile and sends it as soon as one of them is answered: the server is not left
        # with one batch while a lane settles its reply and takes its next.
        self.lanes = pipeline + 1 if pipeline > 1 else 1
        self.turns = threading.BoundedSemaphore(self.lanes)  # cycles running at once
        self.wire = threading.BoundedSemaphore(pipeline)  # batches on the way at once
        self._holds = holds
        self._cycles = cycles
        self._sweeper = sweeper
        self._stopping = stopping
        self._clock = clock
        self._on_error = on_error
        self._state_lock = threading.Lock()  # totals and the reconnect backoff

    def run(self, deadline: float | None, *, honour_stop: bool, lanes: int = 0) -> bool:
        """Cycles, one after another, until one takes nothing (True), in ``lanes`` (by
        default all the engine's) side by side: this thread runs one, pool threads the
        others (each this same method, ``lanes=1``). False when the queue is paused, the
        server unreachable or holding us off (429), time is up, and (``honour_stop``, the
        background loop) when the engine is stopping or the monitor says offline. An
        explicit flush tries whatever the monitor says. Read top to bottom: start the other
        lanes; per cycle, the checks, a turn, the executor's pass, the accounting; gather
        the lanes."""
        pool, others = self._start_others(lanes or self.lanes, deadline, honour_stop)
        done: bool | None = None  # True: a cycle found nothing due; None: go on
        # Operations the last pass took for the next in its settling's transaction: this
        # lane's cycle stays open (busy, for drain) until they are sent or released.
        carried: list[Operation] | None = None
        try:
            with self._cycles.lane():  # see SyncEngine.stop
                while done is None:
                    done = self._stop_before(honour_stop)
                    if done is not None:
                        break
                    # The cycle: a turn (one per lane), one executor pass, whose request
                    # waits for its place on the wire (at most ``pipeline`` at once).
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not self.turns.acquire(timeout=timeout):
                        break
                    report: CycleReport | None = None
                    taken, carried = carried, None
                    if taken is None:
                        self._cycles.begin()  # before next_batch: see SyncEngine.drain
                    try:
                        report, carried = self.executor.run_pass(
                            self.cycle_size,
                            wire=self.wire,
                            taken=taken,
                            then_take=lambda last: self._goes_on(last, deadline, honour_stop),
                        )
                    finally:
                        self.turns.release()
                        # A flush or drain in another thread may wait for these operations.
                        if carried is None:
                            self._cycles.end(took=report is None or report.taken > 0)
                        else:
                            self._cycles.passed()
                    self._account(report)
                    done = self._stop_after(report, deadline)
        finally:
            if carried is not None:  # taken for a pass that will not run
                try:
                    self.executor.release_taken(carried)
                finally:
                    self._cycles.end(took=True)
            if pool is not None:
                pool.shutdown(wait=True)  # every lane ends its cycle before we return
        return all([bool(done), *(lane.result() for lane in others)])

    def _start_others(
        self, lanes: int, deadline: float | None, honour_stop: bool
    ) -> tuple[ThreadPoolExecutor | None, list[Future[bool]]]:
        if lanes <= 1:
            return None, []
        pool = ThreadPoolExecutor(lanes - 1, thread_name_prefix="pigeon-lane")
        others = [
            pool.submit(self.run, deadline, honour_stop=honour_stop, lanes=1)
            for _ in range(lanes - 1)
        ]
        return pool, others

    def _stop_before(self, honour_stop: bool) -> bool | None:
        """Whether this lane stops before its next cycle (True: done, nothing due was held
        back; False: not done) or goes on (None)."""
        if self.queue.paused is not None:
            return False
        now = self._clock()
        if now < self._holds.throttled_until:
            # Held off by a 429: done if nothing due was held back. One "now" for both
            # looks, or a hold ending in between reads as holding.
            due = self.queue.next_due_at()
            return due is None or due > now
        if honour_stop and self._stopping_now():
            return False
        return None

    @staticmethod
    def _stop_after(report: CycleReport, deadline: float | None) -> bool | None:
        """As `_stop_before`, after a cycle that did what ``report`` says."""
        if report.unreachable or report.paused is not None:
            return False
        if report.error is not None:  # no request could be made: back off
            return False
        if report.taken == 0:  # (after a 429: the hold is looked at before the next)
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        return None

    def _goes_on(self, report: CycleReport, deadline: float | None, honour_stop: bool) -> bool:
        """Whether the cycle after ``report``'s would run: the loop's checks, made before
        its operations are taken in ``report``'s settling (`Executor.run_pass`). A pause
        is the taking's own look: nothing is taken from a paused queue."""
        if report.throttled_until is not None or self._stop_after(report, deadline) is not None:
            return False
        if self._clock() < self._holds.throttled_until:
            return False
        return not (honour_stop and self._stopping_now())

    def _stopping_now(self) -> bool:
        return self._stopping.is_set() or not self.connectivity.online

    def _account(self, report: CycleReport) -> None:
        with self._state_lock:
            self.totals.add(report)
            if report.conflicts:
                self._sweeper.due = True
            self._holds.after(report)
            # Only a failed connection says the server is unreachable: a probe would find
            # it up and wake us at once, when it is the token that is failing.
            if report.unreachable:
                self.connectivity.report_unreachable()
            elif report.sent and report.error is None:
                self.connectivity.report_reachable()
        if report.error is not None:  # outside the lock: on_error is application code
            failure(
                log,
                "pigeon sync: a request could not be made",
                exc=report.error,
                level=logging.WARNING,
            )
            self._on_error(report.error)
