"""A child process pigeon starts ends with the process that started it.

A supervisor killed with SIGKILL runs no cleanup: its children would go on (a worker
claiming jobs, a uvicorn worker serving) with parent pid 1. Two guards, both in the child:

- ``die_with_parent``, first thing: on Linux the kernel is asked (``prctl(PR_SET_PDEATHSIG)``)
  to send a signal when the parent dies; then the parent is checked, since one that died
  before the request was made would never send it.
- a parent check where the platform has no such request, and as a second line where it
  has: the worker's heartbeat (``pigeon.jobs.heartbeat``) or ``watch_parent``'s thread.

The kernel's signal comes when the *thread* that started the child ends, not the process:
a parent starting children from a short-lived thread must not ask for it (``deathsig``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time

log = logging.getLogger("pigeon.orphans")

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_ENV = "PIGEON_PARENT"  # "PID:DEATHSIG" handed to a pigeon command by its parent


def parent_gone(parent: int) -> bool:
    """True once this process's parent is no longer ``parent`` (it died: re-parented)."""
    return os.getppid() != parent


def die_with_parent(parent: int, sig: int = signal.SIGTERM, *, deathsig: bool = True) -> bool:
    """Send this process ``sig`` when ``parent`` dies (Linux; ``deathsig``: the parent
    started it from a thread that lives as long as the parent), and at once if it has
    died already. True when the kernel took the request."""
    asked = False
    if deathsig and sys.platform.startswith("linux"):
        import ctypes  # here: most pigeon commands never start as a child

        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            asked = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    if parent_gone(parent):  # died before the request: its signal will never come
        log.warning("parent process %d is gone; ending process %d", parent, os.getpid())
        os.kill(os.getpid(), sig)
    return asked


def watch_parent(parent: int, sig: int = signal.SIGTERM, interval: float = 1.0) -> threading.Thread:
    """A daemon thread sending this process ``sig`` once ``parent`` is gone: the parent
    check of a process without a heartbeat of its own (a uvicorn worker)."""

    def watch() -> None:
        while not parent_gone(parent):
            time.sleep(interval)
        log.warning("parent process %d is gone; ending process %d", parent, os.getpid())
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=watch, name="pigeon-parent-watch", daemon=True)
    thread.start()
    return thread


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``PARENT_ENV`` naming this process, for a
    pigeon command started here; the kernel's signal only when started from the main
    thread (see the module's note)."""
    main = threading.current_thread() is threading.main_thread()
    return dict(os.environ if env is None else env) | {PARENT_ENV: f"{os.getpid()}:{int(main)}"}


def adopt_parent_from_env() -> None:
    """In a pigeon command: if its parent named itself (``child_env``), end with it."""
    value = os.environ.pop(PARENT_ENV, "")  # not inherited further down
    pid, _, deathsig = value.partition(":")
    if not pid.isdigit():
        return
    die_with_parent(int(pid), deathsig=deathsig == "1")
    watch_parent(int(pid))
