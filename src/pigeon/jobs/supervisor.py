"""The Supervisor: worker processes for the configured queues, kept alive.

``--queue grading=12 --queue notify=4`` with two processes lets each process run up to 6
grading and 2 notify threads (``grading=2:12`` also sets the minimum, split the same
way); each process scales its threads within its share, so together they never exceed
the App's ``max_workers``. A child that exits is replaced: after recycling (exit code 3), after
being abandoned for a stuck job (70) or after a crash; one that keeps failing within
seconds of its start is relaunched with a growing delay, not on every check. SIGTERM to
the supervisor is passed on to every child, which stops claiming and finishes or releases
its jobs within the lease.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from pigeon import lifecycle, logs
from pigeon.core.imports import add_app_dir
from pigeon.exceptions import ConfigurationError
from pigeon.jobs.app import load_app
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.options import WorkerOptions as WorkerOptions  # its home before options.py
from pigeon.jobs.worker import RECYCLE, STUCK, Worker
from pigeon.orphans import die_with_parent

log = logging.getLogger("pigeon.jobs.supervisor")

# A child that exits on its own with an error this soon after its start (not recycled,
# not abandoned for a stuck job, not killed by a signal) failed to start: the database
# unreachable, the app failing to import. Relaunching it at once would spawn an
# interpreter every check, so its relaunch waits RELAUNCH_BASE, doubling with each quick
# failure in a row up to RELAUNCH_CAP.
QUICK_EXIT = 10.0
RELAUNCH_BASE = 0.5
RELAUNCH_CAP = 30.0
_RELAUNCH = Backoff(base=RELAUNCH_BASE, cap=RELAUNCH_CAP)  # its ceiling: no jitter here
# A child still running at the end of the stop's grace writes every thread's stack to
# its stderr on this signal, then is killed: what it was stuck in is in the log.
DUMP_THREADS = signal.SIGUSR1


def split(queues: Mapping[str, int], processes: int) -> list[dict[str, int]]:
    """Spread each queue's threads over the processes as evenly as possible."""
    if processes < 1:
        raise ConfigurationError(f"processes must be >= 1, got {processes}")
    shares: list[dict[str, int]] = [{} for _ in range(processes)]
    for queue, count in queues.items():
        for i in range(processes):
            n = count // processes + (1 if i < count % processes else 0)
            if n:
                shares[i][queue] = n
    return [s for s in shares if s]


def split_budgets(budgets: Mapping[str, Budget], processes: int) -> list[dict[str, Budget]]:
    """Each queue's min and max spread over the processes like ``split``; a process
    whose share of a queue's maximum is 0 does not serve it."""
    maxes = split({q: b.max for q, b in budgets.items()}, processes)
    mins = split({q: b.min for q, b in budgets.items()}, processes)
    mins += [{}] * (len(maxes) - len(mins))
    # The larger minimum shares go with the larger maximum shares (both front-loaded).
    return [
        {q: Budget(min(low.get(q, 0), high), high) for q, high in share.items()}
        for share, low in zip(maxes, mins, strict=False)
    ]


def child_main(
    app_ref: str,
    db_path: str,
    queues: dict[str, Budget],
    options: WorkerOptions,
    app_dir: str | None = None,
    parent: tuple[int, bool] | None = None,
) -> None:
    """Entry point of one worker process. ``parent``: the supervisor's pid, and whether
    it may ask the kernel for a signal at its death (pigeon.orphans): SIGTERM then, which
    stops the worker as the supervisor's own would."""
    from pigeon.storage.crypto import Keyring
    from pigeon.storage.server import open_server_db

    logs.configure(options.log_format, logging.WARNING, options.log_redact)
    with contextlib.suppress(AttributeError, ValueError, OSError):  # stderr with no file
        faulthandler.register(DUMP_THREADS, all_threads=True)  # asked for before a kill
    if parent is not None:
        die_with_parent(parent[0], signal.SIGTERM, deathsig=parent[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; it sends SIGTERM
    add_app_dir(app_dir)
    app = load_app(app_ref, db=db_path)
    keyring = Keyring.from_file(options.keys_file) if options.keys_file else Keyring.from_env()
    db = open_server_db(db_path, durability=options.durability, keyring=keyring)
    worker = Worker(
        app,
        db,
        queues,
        options,
        on_stuck=lambda: os._exit(STUCK),
        parent=parent[0] if parent is not None else None,
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    code = worker.run()
    if worker.drained:  # else a thread may be inside a statement, which close would wait for
        db.close()
    raise SystemExit(code)


@dataclass
class _Slot:
    queues: dict[str, Budget]
    process: BaseProcess | None = None
    exits: list[int | None] = field(default_factory=list)
    started: float = 0.0  # monotonic, of the current process
    quick_failures: int = 0  # in a row
    relaunch_at: float | None = None  # set once its exit is seen: when to launch again


class Supervisor:
    def __init__(
        self,
        app_ref: str,
        db_path: str,
        queues: Mapping[str, int | Budget],
        *,
        processes: int = 2,
        options: WorkerOptions | None = None,
        app_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """``app_dir``: a directory put first on ``sys.path`` here and in every child
        before the app is imported (``pigeon worker`` passes the current directory)."""
        # Absolute now: the children import from where the supervisor was started.
        self.app_dir = add_app_dir(app_dir)
        app = load_app(app_ref, db=db_path)  # fail here, not in every child
        self.budgets = {q: app.queue_config(q).budget(spec) for q, spec in queues.items()}
        self.app_ref = app_ref
        self.db_path = db_path
        self.options = options or WorkerOptions()
        self.grace = max(app.queue_config(q).timeouts.lease_seconds for q in queues)
        self.slots = [_Slot(share) for share in split_budgets(self.budgets, processes)]
        self._ctx: Any = multiprocessing.get_context("spawn")
        self._stop = threading.Event()
        self.restarts = 0
        self.recycled = 0

    def _launch(self, slot: _Slot) -> None:
        # The kernel's death signal follows the launching thread (pigeon.orphans): asked
        # for only when that is the main thread, which lives as long as this process.
        main = threading.current_thread() is threading.main_thread()
        parent = (os.getpid(), main)
        slot.process = self._ctx.Process(
            target=child_main,
            args=(self.app_ref, self.db_path, slot.queues, self.options, self.app_dir, parent),
            name="pigeon-worker",
        )
        slot.process.start()
        slot.started = time.monotonic()
        slot.relaunch_at = None

    def start(self) -> None:
        for slot in self.slots:
            self._launch(slot)

    def sizes(self) -> str:
        """Its processes and each queue's threads, as the commands that start it say them."""
        n = len(self.slots)
        threads = {q: str(b) for q, b in self.budgets.items()}
        return f"{n} process{'' if n == 1 else 'es'}, threads min:max {threads}"

    def pids(self) -> list[int]:
        return [s.process.pid for s in self.slots if s.process and s.process.pid is not None]

    def check(self) -> int:
        """Replace every child that has exited (after a quick failure, once its backoff
        has passed); returns how many were replaced."""
        replaced = 0
        for slot in self.slots:
            proc = slot.process
            if proc is None or proc.is_alive() or self._stop.is_set():
                continue
            now = time.monotonic()
            if slot.relaunch_at is None:
                self._exited(slot, proc, now)
            assert slot.relaunch_at is not None
            if now < slot.relaunch_at:
                continue
            self.restarts += 1
            replaced += 1
            self._launch(slot)
        return replaced

    def _exited(self, slot: _Slot, proc: BaseProcess, now: float) -> None:
        proc.join()
        code = proc.exitcode
        slot.exits.append(code)
        lived = now - slot.started
        if code == RECYCLE:
            self.recycled += 1
        quick = code is not None and code > 0 and code not in (RECYCLE, STUCK)
        quick = quick and lived < QUICK_EXIT
        slot.quick_failures = slot.quick_failures + 1 if quick else 0
        wait = _RELAUNCH.ceiling(slot.quick_failures) if quick else 0.0
        # One line at WARNING, the level every pigeon process shows by default: a worker
        # replaced is an event an operator can count, whatever the reason.
        if code == RECYCLE:
            log.warning("worker %s recycled after %.1fs; replacing it", proc.pid, lived)
            lifecycle.count_event_at(
                self.db_path, lifecycle.WORKER_RECYCLED, lifecycle.event_origin(proc.pid)
            )
        else:
            log.warning(
                "worker %s exited with %s after %.1fs; replacing it in %.1fs",
                proc.pid,
                code,
                lived,
                wait,
            )
        slot.relaunch_at = now + wait

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM every child, wait up to ``grace`` (default: the longest lease), then kill."""
        self._stop.set()
        grace = self.grace if grace is None else grace
        live = [s.process for s in self.slots if s.process is not None and s.process.is_alive()]
        for proc in live:
            if proc.pid is not None:
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                log.warning(
                    "worker %s did not stop within %.0fs; its threads' stacks follow, then "
                    "it is killed", proc.pid, grace,
                )  # fmt: skip
                if proc.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, DUMP_THREADS)
                    proc.join(1.0)
                proc.kill()
                proc.join()

    def run(self, interval: float = 0.2) -> None:
        """Supervise until SIGTERM or SIGINT, then stop the children gracefully."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        self.start()
        while not self._stop.wait(interval):
            self.check()
        self.stop()
