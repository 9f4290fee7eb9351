"""The sign-in limiter of the operations page: guessing the operator credential is slow.

Failed sign-ins are counted per client (its address; an IPv6 address by its /64, which one
machine commonly holds whole) and for all clients together, in the server's database
(table ``pigeon_ops_signin_failures``), so every process and node of the server counts the
same attempts. After ``free`` failures, each further failure blocks the client for a delay
that doubles, up to ``cap``; while blocked, its sign-ins are answered 429 with
``Retry-After`` and the credential is not even checked. The count starts again after
``forget`` seconds without a failure; a successful sign-in clears its client's count.

The global guard does the same for all clients at once, with a larger allowance and a
shorter cap: an attacker spread over many addresses is slowed too, at the price of the
operator's own browser waiting out that (short) delay meanwhile. Scripts and the CLI,
which send the credential as a header, never pass through here.

Nothing waits on the event loop: the answer is an immediate 429, and the page calls this
module from a worker thread (it reads and writes the database).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from pigeon.jobs._db import reading
from pigeon.ops.session import SESSIONS
from pigeon.storage.base import Database

ALL_CLIENTS = "*"


@dataclass(frozen=True, slots=True)
class SignInBackoff:
    """``free`` failures allowed, then a block of ``base`` seconds doubling with each
    further failure up to ``cap``; the count is forgotten after ``forget`` quiet seconds."""

    free: int
    base: float
    cap: float
    forget: float

    def delay(self, failures: int) -> float:
        """Seconds blocked after the ``failures``-th failure (0: not blocked)."""
        if failures < self.free:
            return 0.0
        return min(self.cap, self.base * 2.0 ** min(failures - self.free, 62))


@dataclass(frozen=True, slots=True)
class SignInLimit:
    """The per-client and the global backoff (see the module's docstring)."""

    client: SignInBackoff = SignInBackoff(free=5, base=1.0, cap=900.0, forget=3600.0)
    everyone: SignInBackoff = SignInBackoff(free=50, base=1.0, cap=60.0, forget=600.0)


def client_key(host: str | None) -> str:
    """Whom the count is kept for: the address, an IPv6 one by its /64 network."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # not an address (a Unix socket's peer): never the global row
        return "host:" + host[:64]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class SignInLimiter:
    """Failed sign-ins in ``db`` under ``limit``; ``clock``: seconds since the epoch."""

    def __init__(
        self,
        db: Database,
        limit: SignInLimit | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.limit = limit or SignInLimit()
        self.clock = clock

    def retry_after(self, client: str) -> int:
        """Whole seconds the client must wait before it may try again (0: now)."""
        with reading(self.db) as tx:
            rows = SESSIONS.run(tx, "signin_blocks", {"client": client}).fetchall()
        now = self.clock()
        until = max((float(r["blocked_until"]) for r in rows), default=0.0)
        return math.ceil(until - now) if until > now else 0

    def failed(self, client: str) -> None:
        """Count a failed sign-in of ``client`` (and of all clients); block as due."""
        now = self.clock()
        with self.db.transaction() as tx:
            for key, backoff in ((client, self.limit.client), (ALL_CLIENTS, self.limit.everyone)):
                params = {"client": key, "now": now, "forget_before": now - backoff.forget}
                failures = int(SESSIONS.run(tx, "signin_failed", params).fetchone()["failures"])
                delay = backoff.delay(failures)
                if delay > 0:
                    SESSIONS.run(tx, "signin_block", {"client": key, "until": now + delay})
            oldest = now - max(self.limit.client.forget, self.limit.everyone.forget)
            SESSIONS.run(tx, "signin_purge", {"before": oldest, "now": now})

    def succeeded(self, client: str) -> None:
        """The client signed in: its own count starts again (the global one does not)."""
        with self.db.transaction() as tx:
            SESSIONS.run(tx, "signin_forget", {"client": client})
