"""Is the server reachable? A pluggable monitor the engine consults before sending.

`ManualMonitor`: the application knows (an OS network callback, a UI toggle) and calls
``set_online``. `ProbeMonitor` (the default): assume online until a request fails to
connect, then probe ``/pigeon/v1/health`` in the background with exponential backoff and
full jitter until it answers (any HTTP status: a 5xx is a sick server, which the
executor's backoff handles, not a lost network). While online it sends nothing of its
own, so it costs nothing when things work.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pigeon.core.retry import RetryPolicy
from pigeon.logs import failure

log = logging.getLogger("pigeon.sync")

Listener = Callable[[bool], None]

# max_attempts is irrelevant here: a probe never gives up.
DEFAULT_PROBE_BACKOFF = RetryPolicy(base=0.5, factor=2.0, cap=30.0, max_attempts=1_000_000)


@runtime_checkable
class ConnectivityMonitor(Protocol):
    @property
    def online(self) -> bool: ...

    def set_online(self, online: bool) -> None:
        """The application's word on connectivity."""
        ...

    def report_unreachable(self) -> None:
        """The engine could not connect to the server."""
        ...

    def report_reachable(self) -> None:
        """The engine got a reply from the server."""
        ...

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(online)`` whenever the state changes."""
        ...

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener`` (once per time it was subscribed; unknown: no-op)."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class ManualMonitor:
    """Online is whatever the application last said. A failed connection does not flip
    it (the engine backs off on its own); ``set_online`` does."""

    def __init__(self, online: bool = True) -> None:
        self._online = online
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    @property
    def online(self) -> bool:
        return self._online

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Once per time it was subscribed; a listener never subscribed is ignored."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def set_online(self, online: bool) -> None:
        self._change(online)

    def report_unreachable(self) -> None:
        pass

    def report_reachable(self) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def _change(self, online: bool) -> None:
        with self._lock:
            changed = online != self._online
            self._online = online
            listeners = list(self._listeners)
        if changed:
            for listener in listeners:
                try:
                    listener(online)
                except Exception as exc:
                    failure(log, "connectivity listener raised", exc=exc)


class ProbeMonitor(ManualMonitor):
    """Probe with ``probe()`` (e.g. `HttpTransport.probe`) while the server is unreachable."""

    def __init__(
        self,
        probe: Callable[[], bool],
        *,
        backoff: RetryPolicy = DEFAULT_PROBE_BACKOFF,
        online: bool = True,
    ) -> None:
        super().__init__(online)
        self._probe = probe
        self._backoff = backoff
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.probes = 0  # how many probes were sent: for tests and metrics

    def set_online(self, online: bool) -> None:
        # "Offline" from the app means "verify": probing starts (with backoff).
        self._change(online)
        self._wake.set()

    def report_unreachable(self) -> None:
        self._change(False)
        self._wake.set()

    def report_reachable(self) -> None:
        self._change(True)

    def start(self) -> None:
        thread = self._thread
        if thread is not None and thread.is_alive():
            if thread is threading.current_thread():
                self._stopping.clear()  # stop() then start() in a listener: carry on
                return
            if not self._stopping.is_set():
                return  # running
            thread.join()  # after a stop that did not wait for it: one probe thread
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="pigeon-probe", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        # From a listener (they run on the probe thread) it ends once the listener returns;
        # joining it from there raised RuntimeError into the listener.
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        if thread is not None and not thread.is_alive():
            self._thread = None  # else kept: start() waits for it, never runs two

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            if self.online:
                failures = 0
                self._wake.wait()
                self._wake.clear()
                continue
            self.probes += 1
            try:
                reachable = self._probe()
            except Exception as exc:
                failure(log, "connectivity probe raised", exc=exc)
                reachable = False
            if reachable:
                self._change(True)
                continue
            failures += 1
            self._wake.wait(self._backoff.delay(failures))
            self._wake.clear()
