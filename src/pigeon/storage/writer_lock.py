"""The write lock of a SQLite file: one writer at a time among the threads of a process,
and among the processes that open the file through pigeon.

SQLite serialises writers by itself, but a BEGIN IMMEDIATE that finds the file locked
waits in the busy handler, which sleeps in growing steps (1, 2, 5 ... 100 ms): a writer
that commits in 5 ms can leave the next one asleep for 25 ms more, and two intake
processes on one file (``pigeon serve --workers 2``) did no more than one. Threads wait on a
lock that is handed over at once; processes on an advisory lock (``flock``) of a file
beside the database (``<file>-writer``), which the kernel hands to a waiter as soon as it
is let go. That file only orders pigeon's own writers: SQLite's lock still guards the
database against any other. Where the file lock cannot be had (a read-only folder, a
filesystem without ``flock``), or is not had within the busy timeout, SQLite's busy
handler decides as before.

A blocking ``flock`` has no timeout, so a process waits for the file lock in a thread of
its own (``_Waiter``), on a descriptor of its own, while the thread that wants the lock
waits for that one no longer than its deadline. A wait given up leaves the thread
blocked: the next wait takes it over, and should the lock come to it with nobody waiting,
it lets go at once. Polling instead (every 0.5-2 ms, as before) left the lock idle for up
to a pause after each commit.
"""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType

from pigeon.storage.files import lock_file

try:
    import fcntl
except ImportError:  # pragma: no cover - no flock on this platform: SQLite's wait alone
    fcntl = None  # type: ignore[assignment]

SUFFIX = "-writer"  # beside the database, as SQLite's own -wal and -shm


class WriterLock:
    """Reentrant within a thread (a nested BEGIN meets SQLite's own error, not a deadlock);
    the file lock is taken by the outermost hold only. ``wait``: how long a hold with no
    timeout waits for the file lock before it leaves the wait to SQLite."""

    def __init__(self, path: str, wait: float) -> None:
        self.path = path
        self.wait = wait
        self._threads = threading.RLock()
        self._depth = 0  # holds of the thread that has it
        # The lock file's descriptor, and whether a holder may be using it: close() leaves
        # it to that holder's release (a descriptor closed under it could be reused).
        self._guard = threading.Lock()
        self._fd: int | None = None
        self._in_use = False
        self._closed = False
        self._waiter: _Waiter | None = None  # the thread that waits in flock, once needed
        special = not path or path == ":memory:" or path.startswith("file:")
        self._usable = fcntl is not None and not special

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As ``threading.RLock.acquire``; with a ``timeout``, the file lock's wait ends by
        it too (False: neither is held)."""
        started = time.monotonic()
        if not self._threads.acquire(blocking, timeout):
            return False
        if self._depth == 0:
            bounded = timeout >= 0 or not blocking
            try:
                taken = self._take_file(started + (max(0.0, timeout) if bounded else self.wait))
            except BaseException:
                self._threads.release()
                raise
            if taken is None and bounded:
                self._threads.release()
                return False
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._let_go()
        self._threads.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def close(self) -> None:
        """No more file lock; its descriptor is closed now, or by the holder's release."""
        with self._guard:
            self._closed = True
            if not self._in_use:
                self._close_file()
        if self._waiter is not None:
            self._waiter.close()

    def _take_file(self, until: float) -> bool | None:
        """True: the file lock is held; False: there is none to take; None: another
        process held it until ``until`` (monotonic)."""
        with self._guard:
            fd = self._open()
            self._in_use = fd is not None
        if fd is None:
            return False
        assert fcntl is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:  # no flock on this filesystem: SQLite's wait alone
            self._usable = False
            self._let_go(held=False)
            return False
        taken = self._wait_file(until - time.monotonic())
        if taken is None:
            self._let_go(held=False)
            return None
        with self._guard:  # the lock is held through the waiter's descriptor: it is ours now
            os.close(fd)
            self._fd = taken
        return True

    def _wait_file(self, timeout: float) -> int | None:
        """The descriptor through which the file lock came within ``timeout`` seconds, or
        None (should it come later, the waiter lets go of it, or hands it to the next)."""
        if timeout <= 0:
            return None
        waiter = self._waiter
        if waiter is None or waiter.forked:
            waiter = self._waiter = _Waiter(self.path + SUFFIX)
        given = waiter.wait(timeout)
        if waiter.failed:  # nor could another thread: SQLite's wait alone from now on
            self._usable = False
        return given

    def _let_go(self, held: bool = True) -> None:
        with self._guard:
            if not self._in_use:
                return
            self._in_use = False
            if held:
                assert fcntl is not None and self._fd is not None
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            if self._closed:
                self._close_file()

    def _open(self) -> int | None:
        if not self._usable:
            return None
        if self._fd is None and not self._closed:
            try:
                self._fd = lock_file(self.path + SUFFIX)
            except OSError:  # a read-only folder, say: SQLite's wait alone
                self._usable = False
        return self._fd

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class _Waiter:
    """A daemon thread that blocks in ``flock`` of the lock file for whoever asks, on a
    descriptor of its own: ``wait`` gives that descriptor once the lock is held through it
    (the thread opens another for the next wait), or None at its timeout. The lock coming
    after its asker gave up goes to the next asker, or is let go at once if there is none.
    One thread for all of a lock's waits: starting one a wait cost ~85 µs of CPU."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._pid = os.getpid()  # a forked child has the object, not the thread
        self._state = threading.Condition()
        self._asked = False  # someone waits for the lock now
        self._given: int | None = None  # the descriptor holding it, for that one
        self._failed = False  # the thread could not wait (no descriptor, no flock)
        self._closing = False  # the lock is closed: the thread ends
        threading.Thread(target=self._serve, name="pigeon-writer-lock", daemon=True).start()

    @property
    def forked(self) -> bool:
        """Is this a forked child's copy (its thread is the parent's)?"""
        return self._pid != os.getpid()

    @property
    def failed(self) -> bool:
        """Could its thread not wait (no descriptor, or no ``flock`` there)?"""
        return self._failed

    def wait(self, timeout: float) -> int | None:
        until = time.monotonic() + timeout
        with self._state:
            self._asked = True
            self._state.notify_all()
            while self._given is None and not (self._failed or self._closing):
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._state.wait(left)
            given, self._given = self._given, None
            if given is None:
                self._asked = False  # given up: should it come now, it is let go
            return given

    def close(self) -> None:
        """End the thread: now if it waits for an asker, else once the lock came to it."""
        with self._state:
            self._closing = True
            self._state.notify_all()

    def _serve(self) -> None:
        assert fcntl is not None
        while True:
            with self._state:
                while not self._asked and not self._closing:
                    self._state.wait()
                if self._closing:
                    return
            try:
                fd = lock_file(self._path)
            except OSError:
                self._fail()
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # the interpreter's lock is let go meanwhile
            except OSError:
                os.close(fd)
                self._fail()
                return
            if not self._handed(fd):  # nobody waits any more
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _handed(self, fd: int) -> bool:
        """Hand the lock held through ``fd`` to whoever waits for it (False: nobody)."""
        with self._state:
            if not self._asked or self._closing:
                return False
            self._asked, self._given = False, fd
            self._state.notify_all()
            return True

    def _fail(self) -> None:
        with self._state:
            self._failed = True
            self._state.notify_all()
