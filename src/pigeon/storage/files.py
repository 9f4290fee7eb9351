"""Files pigeon creates are its owner's alone (mode 0600), whatever the umask says.

A database file holds what users wrote (even sealed, its size and timing tell something),
so it is made before SQLite opens it: created empty with mode 0600, which SQLite takes as
a new database, and whose permissions SQLite copies to the ``-wal`` and ``-shm`` files it
makes beside it. Nothing is ever written to a file while it is readable by others.
"""

from __future__ import annotations

import contextlib
import os

PRIVATE = 0o600


def private_file(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist; an existing file is left
    as its owner set it. Special names (``:memory:``, ``file:`` URIs) are not files."""
    name = os.fspath(path)
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    except FileExistsError:  # there already, or another process made it first: theirs
        return
    except OSError:  # no such folder, read-only...: SQLite's open names the reason
        return
    os.close(fd)


def lock_file(path: str) -> int:
    """A side file held only for its advisory locks (``flock``): opened read-write, made
    0600 if new. OSError where it cannot be (a read-only folder, say)."""
    return os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE)


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then a rename),
    the file 0600 from its first byte on: for key files."""
    name = os.fspath(path)
    temp = f"{name}.tmp-{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
