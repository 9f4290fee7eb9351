"""Worker threads the jobs tests start (``run_in_thread``), stopped when the test ends
whatever happened in it: a test that fails before its own ``stop`` would leave its
workers polling a database its fixtures have closed, logging into the tests after it
on the same process. tests/jobs/conftest.py calls ``stop_all`` before the test's
fixtures are torn down."""

from __future__ import annotations

import threading

from pigeon.jobs.worker import Worker

_started: list[tuple[Worker, threading.Thread]] = []


def run_in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, kwargs={"grace": 5}, daemon=True)
    thread.start()
    _started.append((worker, thread))
    return thread


def stop_all(timeout: float = 10.0) -> list[Worker]:
    """Stop every worker still running and wait for its thread; the ones that were."""
    running = []
    while _started:
        worker, thread = _started.pop()
        if thread.is_alive():
            running.append(worker)
            worker.stop()
            thread.join(timeout)
    return running
