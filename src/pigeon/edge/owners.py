"""Who has an operation in flight, and whether that queue is still alive.

Every open ``EdgeStore`` takes a token and holds an exclusive ``flock`` on its own file
``<path>-owners/<token>`` for as long as it is open; ``next_batch`` writes the token on
the rows it marks in flight. An owner is alive while its file is locked: the lock goes
with its process (a SIGKILL or power loss releases it) and with ``close()``, which also
removes the file. A file that can be locked, or is missing, belongs to a queue that is
gone, so its in-flight operations go back to pending, same key, while the other queues
of the file (other processes, or other queues in this process) keep theirs. A queue
looks when it opens (unless ``recover=False``) and again from ``next_batch`` every
``recover_every`` seconds, so a running process takes over a dead neighbour's operations
without a restart. The folder itself is never removed: that would race with an opener
making its file in it.

``flock``, not POSIX ``fcntl``/``lockf`` record locks: those belong to the process, so two
queues of one process would see each other as dead, and closing any descriptor of the
file (as a liveness check does) would drop the owner's lock. A ``flock`` belongs to the
open file description: a check opens its own and never disturbs the owner's.

Where there is no ``flock`` (Windows) or the directory cannot be written, a queue has no
token (its rows carry NULL, as rows written before the ``owner`` column did) and the
store falls back on the side lock alone: in-flight operations are recovered on open, only
by an opener that is alone with the file (`pigeon.edge.sqlite.store`).

The token is a short decimal number issued by the queue file itself (``owners_issued`` on
its state row, counted up in a short write transaction when a store opens), never twice
in that file: the token on a row was counted in the same file before it was written, so
even a file restored from a backup issues numbers above every token its rows carry. A
name already in the folder (files made after that backup) is skipped: the file is made
with ``O_EXCL``. Short, because it is written on every row taken: a random 32-hex token
(uuid4, what earlier versions made) cost 6-9% of the delivery cycle's time
(next_batch(100) and mark_delivered_many over 100,000 rows), where a 1-character one
costs nothing measurable. Rows and files with such a 32-hex token can only come from a
process of an earlier version: they are judged by their lock like any other, so
recovered and swept once that process is gone, by a running queue too.

Crash safety: a dead owner's file is removed before the transaction that puts its rows
back commits. A crash in between leaves rows naming a missing file, which is as dead as
one that can be locked, so the next check recovers them; a crash after the commit leaves
at most an unlocked file, which the next open's sweep removes.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable, Iterable

from pigeon.checks import is_number
from pigeon.exceptions import ConfigurationError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; see the module docstring
    fcntl = None  # type: ignore[assignment]

FLOCK: bool = fcntl is not None  # a name mypy does not take for always true

SUFFIX = "-owners"
# How often a running queue looks for operations of queues that died (next_batch). The
# check is one index range over the in-flight heads, plus a flock attempt per other owner
# found there; five seconds keeps it out of the way of a busy sender while a dead
# neighbour's entities wait a few seconds at most.
CHECK_EVERY = 5.0
# What we make: numbers issued by the file (below 10**18, no leading zero), or the uuid4
# hex of earlier versions. Anything else in the directory, or on a row, is not ours to
# judge: never removed, and its rows are left to the opener that is alone.
_NUMBER = re.compile(r"[1-9][0-9]{0,17}")
_TOKEN = re.compile(rf"{_NUMBER.pattern}|[0-9a-f]{{32}}")
_CLAIM_TRIES = 5


def check_every(seconds: float) -> float:
    """A valid check interval (``math.inf``: never while running), or ConfigurationError."""
    if not is_number(seconds) or math.isnan(seconds) or seconds < 0:
        raise ConfigurationError(f"recover_every must be seconds >= 0, not {seconds!r}")
    return float(seconds)


def _claim(directory: str, issue: Callable[[int], int]) -> tuple[str, int] | None:
    """Make and lock a new owner file: ``(token, descriptor)``, None if we cannot.

    ``issue(floor)`` counts the file's next token, above ``floor``, and commits it. The
    floor is the greatest number already naming a file here: such names exist beyond the
    file's count only after the queue file went back (restored from a backup), and
    starting above them spares a transaction per name. Should one appear anyway (made
    meanwhile by another opener of such a file), our ``O_EXCL`` fails and we take the
    next number.

    A sweep by another opener may lock and remove a file between our create and our lock
    (it cannot know the file is new). So after taking the lock we check that the name
    still leads to our file; once we hold the lock nobody else can remove it (removal is
    done only under the lock), so a token returned here is safe to write on rows."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        names = os.listdir(directory)
    except OSError:  # e.g. a read-only directory: no token, the side lock alone
        return None
    floor = max((int(n) for n in names if _NUMBER.fullmatch(n)), default=0)
    for _ in range(_CLAIM_TRIES):
        number = issue(floor)
        token = str(number)
        if not _NUMBER.fullmatch(token):  # 10**18 opens: never, but never ours either
            return None
        floor = number
        name = os.path.join(directory, token)
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another opener's, made since we looked: the next one
            continue
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.path.samestat(os.fstat(fd), os.stat(name)):
                return token, fd
        except OSError:  # swept before we locked it: try another token
            pass
        os.close(fd)
    return None


def dead(directory: str, token: str) -> bool:
    """Whether the queue of ``token`` is gone; if so its file is removed (under its lock).

    Unsure is alive: a file we may not open (another user's) is left alone, and so are its
    operations, rather than sending them twice at once."""
    if not _TOKEN.fullmatch(token):
        return False
    name = os.path.join(directory, token)
    try:
        fd = os.open(name, os.O_RDONLY)
    except FileNotFoundError:  # closed, or removed by an earlier check: gone
        return True
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # locked: its queue is open
            return False
        with contextlib.suppress(OSError):
            os.unlink(name)
        return True
    finally:
        os.close(fd)  # our own open file description: the owner's lock is not touched


class Owners:
    """This store's owner file, and the recovery of other owners' operations."""

    def __init__(
        self,
        path: str,
        *,
        issue: Callable[[int], int],
        every: float,
        recover: bool,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``issue(floor)``: the queue file's next owner number above ``floor``, committed
        (``EdgeStore``). ``recover=False`` (tools that only look, such as the CLI): this
        queue still protects what it marks in flight, but never puts back another
        queue's."""
        self.directory = path + SUFFIX
        self.token: str | None = None
        self._fd: int | None = None
        self._pid = os.getpid()
        if FLOCK:
            claimed = _claim(self.directory, issue)
            if claimed is not None:
                self.token, self._fd = claimed
        # Without flock nobody's liveness can be told: never check while running.
        self._every = check_every(every) if recover and FLOCK else math.inf
        self._monotonic = monotonic
        self._next = monotonic() + self._every  # open has just recovered

    def due(self) -> bool:
        """Time for a running check (then not again for ``every`` seconds): a clock read
        and a comparison, on every next_batch."""
        if self._every == math.inf:
            return False
        now = self._monotonic()
        if now < self._next:
            return False
        self._next = now + self._every
        return True

    def gone(self, tokens: Iterable[str]) -> list[str]:
        """Which of ``tokens`` (the owners of in-flight rows, found by the store) belong
        to queues that are gone: the store puts their rows back to pending in the
        transaction that found them. This queue's own token is never among them."""
        if not FLOCK:
            return []
        return [t for t in tokens if t != self.token and dead(self.directory, t)]

    def sweep(self) -> None:
        """Remove the files of owners that are gone and had nothing in flight (a process
        killed while idle), so crashes do not pile up files. Best effort."""
        if not FLOCK:
            return
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if name != self.token:
                dead(self.directory, name)

    def close(self) -> None:
        """Give the token up: what this queue left in flight becomes recoverable. The file
        goes first, while still locked, so no check sees it unlocked and ours.

        A forked child shares the lock (one open file description) and only lets go of
        its descriptor: removing the file would make the parent look dead while it runs."""
        if self._fd is None:
            return
        assert self.token is not None
        if os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.directory, self.token))
        os.close(self._fd)
        self._fd = None
