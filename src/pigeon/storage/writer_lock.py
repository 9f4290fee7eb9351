"""The write lock of a SQLite file: one writer at a time among the threads of a process,
and among the processes that open the file through pigeon.

SQLite serialises writers by itself, but a BEGIN IMMEDIATE that finds the file locked
waits in the busy handler, which sleeps in growing steps (1, 2, 5 ... 100 ms): a writer
that commits in 5 ms can leave the next one asleep for 25 ms more, and two intake
processes on one file (``pigeon serve --workers 2``) did no more than one. Threads wait on a
lock that is handed over at once; processes on an advisory lock (``flock``) of a file
beside the database (``<file>-writer``), tried every millisecond or two. That file only
orders pigeon's own writers: SQLite's lock still guards the database against any other.
Where the file lock cannot be had (a read-only folder, a filesystem without ``flock``),
or is not had within the busy timeout, SQLite's busy handler decides as before.
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
_STEP_MAX = 0.002  # the longest pause between two tries of the file lock


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

    def _take_file(self, until: float) -> bool | None:
        """True: the file lock is held; False: there is none to take; None: another
        process held it until ``until`` (monotonic)."""
        with self._guard:
            fd = self._open()
            self._in_use = fd is not None
        if fd is None:
            return False
        assert fcntl is not None
        pause = 0.0005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            except OSError:  # no flock on this filesystem: SQLite's wait alone
                self._usable = False
                self._let_go(held=False)
                return False
            left = until - time.monotonic()
            if left <= 0:
                self._let_go(held=False)
                return None
            time.sleep(min(pause, left))
            pause = min(pause * 2, _STEP_MAX)

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
        if self._fd is None and self._usable and not self._closed:
            try:
                self._fd = lock_file(self.path + SUFFIX)
            except OSError:  # a read-only folder, say: SQLite's wait alone
                self._usable = False
        return self._fd

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
