"""``Subscribers``: who to tell that something was committed, and telling them safely."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pigeon.exceptions import ConfigurationError
from pigeon.logs import failure

logger = logging.getLogger("pigeon.edge.queue")

Callback = Callable[[], object]


class Subscribers:
    """A list of no-argument callbacks. ``notify`` calls each in the calling thread; an
    exception from one is logged and the rest still run (a subscriber's bug must never
    turn a committed enqueue into an error for its caller)."""

    def __init__(self) -> None:
        self._callbacks: tuple[Callback, ...] = ()
        self._lock = threading.Lock()

    def add(self, callback: Callback) -> None:
        if not callable(callback):
            raise ConfigurationError(f"subscribe needs a callable, not {callback!r}")
        with self._lock:
            self._callbacks = (*self._callbacks, callback)

    def remove(self, callback: Callback) -> None:
        """Once per time it was added; a callback never added is ignored."""
        with self._lock:
            callbacks = list(self._callbacks)
            if callback in callbacks:
                callbacks.remove(callback)
            self._callbacks = tuple(callbacks)

    def notify(self) -> None:
        for callback in self._callbacks:  # a snapshot: add/remove swap the tuple
            try:
                callback()
            except Exception as exc:
                failure(logger, "enqueue subscriber %s failed", _name(callback), exc=exc)


def _name(callback: object) -> str:
    """A callback by its name: its repr may show the arguments bound to it (a partial)."""
    return str(getattr(callback, "__qualname__", None) or type(callback).__qualname__)
