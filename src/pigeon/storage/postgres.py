"""PostgreSQL backend: many intake processes and worker nodes on one database.

A psycopg 3 connection pool; every transaction borrows one connection for its duration.
A connection whose backend went away (a restarted server, a terminated backend) is found
at checkout and replaced at once, so a process survives the database going away and
coming back. While it is away a transaction waits at most ``acquire_timeout`` for a
connection and then raises ``StoreUnavailable`` (the intake answers 503: fail closed,
never run without the claim); a thread with a deadline (``storage.deadline``: a running
job) waits for a connection and for each answer no longer than it. A pool slot whose
reconnection keeps failing gives up after ``reconnect_timeout`` and is re-grown on demand,
so recovery after a long outage does not wait out a long backoff. Migrations are numbered
like SQLite's and applied under an advisory lock, so two processes starting at once do
not race.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.abc import PQGen
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from pigeon.exceptions import ConfigurationError, StoreUnavailable
from pigeon.storage import deadline
from pigeon.storage.base import NamedStatements, Params
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.errors import from_postgres
from pigeon.storage.postgres_tx import PostgresTx, transaction_on
from pigeon.storage.schema import Component, migrate_component

Row = dict[str, Any]
RV = TypeVar("RV")


class Connection(psycopg.Connection[Row]):
    """psycopg's connection, whose every wait for the server (a statement's answer, a
    pipeline's, a COMMIT's) ends by the calling thread's deadline (``storage.deadline``).
    One that runs out leaves the connection in an unknown state: it is closed (the pool
    drops it) and ``JobTimeout`` raised, as a network partition would otherwise hold the
    thread until the kernel gives up on the socket (``network_timeout``)."""

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        if deadline.left() is None:  # the common case: no deadline, psycopg's own wait
            return super().wait(gen, interval, timeout)
        limit, bounded = deadline.bound(float("inf") if timeout is None else timeout)
        try:
            return super().wait(gen, interval, limit)
        except psycopg.OperationalError as exc:
            if not bounded or deadline.left() != 0:
                raise
            self.pgconn.finish()  # mid-exchange: never to be lent again
            raise deadline.expired("PostgreSQL's answer") from exc


def usable(conn: Connection) -> bool:
    """Is this idle pooled connection still connected? Costs a round trip only if in doubt.

    An idle connection has nothing to read unless its server went away: a terminated
    backend leaves its FATAL message and EOF on the socket. Only then is it probed.
    """
    if conn.closed or conn.broken:
        return False
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        if not poller.poll(0):
            return True
        ConnectionPool.check_connection(conn)
    except (OSError, ValueError, psycopg.Error):
        return False
    return True


class BorrowedPostgresTx(NamedStatements[psycopg.Cursor[Row]]):
    """A ``Tx`` over the application's own connection, in a transaction it opened and
    will end (``pigeon.storage.server.borrow``): rows as dicts whatever the connection's
    row factory, which stays the application's."""

    backend = "postgres"

    def __init__(
        self, conn: psycopg.Connection[Any], queries: Mapping[str, str], cipher: Cipher = PLAIN
    ) -> None:
        self.conn = conn
        self.queries = queries
        self.cipher = cipher  # seals the columns that hold what users wrote

    def sql_many(self, statement: str, params: Sequence[Params]) -> int:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.executemany(statement, params)
            return cur.rowcount

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> psycopg.Cursor[Row]:
        """The application's own statement (see `pigeon.storage.base.Tx.sql`)."""
        return self.conn.cursor(row_factory=dict_row).execute(statement, params or {})

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        with self.conn.transaction():  # nested: psycopg issues SAVEPOINT / ROLLBACK TO
            yield


def commit_with(conn: psycopg.Connection[Any], statement: str, params: Mapping[str, Any]) -> None:
    """End the application's transaction on ``conn`` with ``statement`` and COMMIT in one
    round trip: psycopg's pipeline mode sends both, then one Sync, and reads the answers.
    A statement that fails makes PostgreSQL skip the COMMIT behind it (what follows an
    error is not run up to the Sync) and raises here; the transaction, aborted, is then
    the application's to roll back."""
    with conn.cursor() as cur, conn.pipeline():
        cur.execute(statement, params)
        cur.execute("COMMIT")


async def commit_with_async(
    conn: psycopg.AsyncConnection[Any], statement: str, params: Mapping[str, Any]
) -> None:
    """``commit_with`` on an asyncio connection."""
    async with conn.cursor() as cur, conn.pipeline():
        await cur.execute(statement, params)
        await cur.execute("COMMIT")


def pipelines() -> bool:
    """Can psycopg send statements without waiting (libpq 14 and later)?"""
    return psycopg.capabilities.has_pipeline()


def borrowable(conn: object) -> bool:
    return isinstance(conn, psycopg.Connection)


def borrowable_async(conn: object) -> bool:
    return isinstance(conn, psycopg.AsyncConnection)


def in_transaction(conn: psycopg.Connection[Any]) -> bool:
    """Will the next statement run in a transaction the application ends? (Not when the
    connection commits each statement by itself.)"""
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return not (conn.autocommit and idle)


def _liveness(network_timeout: float) -> dict[str, int]:
    """libpq settings that notice a dead peer within about ``network_timeout`` seconds:
    unacknowledged data gives up after that long, and an idle connection is probed
    from a third of it on, three times."""
    idle = max(1, int(network_timeout / 3))
    return {
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": max(1, idle // 3),
        "keepalives_count": 3,
        "tcp_user_timeout": int(network_timeout * 1000),
    }


class PostgresDatabase:
    backend = "postgres"

    def __init__(
        self,
        url: str,
        *,
        queries: Mapping[str, str],
        components: tuple[str, ...] = ("server",),
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
        acquire_timeout: float = 10.0,
        reconnect_timeout: float = 10.0,
        connect_timeout: int = 5,
        network_timeout: float = 15.0,
        cipher: Cipher = PLAIN,
    ) -> None:
        """``network_timeout``: seconds a connection may go silent (a network partition:
        no reset, packets just vanish) before the kernel declares it dead, so a request
        on it fails closed with 503 instead of hanging for the ~15 minutes of TCP's own
        retransmission limit. Applied as libpq's TCP keepalives and tcp_user_timeout."""
        if not network_timeout > 0:
            raise ConfigurationError(f"network_timeout must be positive, not {network_timeout}")
        self.url = url
        self.queries = queries
        self.cipher = cipher
        self.connect_timeout = connect_timeout
        # No pool-side check: its failure path sleeps a backoff per dead connection
        # (1 s, 2 s, ...), where ``usable`` discards them and moves on at once.
        self.pool: ConnectionPool[Connection] = ConnectionPool(
            url,
            connection_class=Connection,
            kwargs={
                "row_factory": dict_row,
                "connect_timeout": connect_timeout,
                **_liveness(network_timeout),
            },
            min_size=min_size,
            max_size=max_size,
            timeout=acquire_timeout,
            reconnect_timeout=reconnect_timeout,
            open=False,
        )
        try:
            self.pool.open(wait=True, timeout=timeout)
        except Exception as exc:
            self.pool.close()
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
        try:
            for component in components:
                self._migrate(component)
        except BaseException:
            self.pool.close()
            raise

    def _migrate(self, component: str) -> None:
        # Numbered like SQLite's, versions in pigeon_schema, one migrator at a time
        # (an advisory lock): `pigeon.storage.schema`.
        migrate_component(self, Component(component))

    def _checkout(self) -> Connection:
        # Every pooled connection may be dead after an outage: at most max_size discards
        # (each replaced in the background), then a fresh one or the acquire timeout.
        for _ in range(self.pool.max_size + 1):
            conn = self._getconn()
            if usable(conn):
                return conn
            self.pool.putconn(conn)  # closed: the pool drops it and connects a new one
        raise StoreUnavailable("PostgreSQL unavailable: every pooled connection was dead")

    def _getconn(self) -> Connection:
        """A connection from the pool, waited for no longer than the acquire timeout nor
        past the thread's deadline (``JobTimeout`` then, not ``StoreUnavailable``)."""
        timeout, bounded = deadline.bound(self.pool.timeout)
        if bounded and timeout <= 0:
            raise deadline.expired("a PostgreSQL connection")
        try:
            return self.pool.getconn(timeout)
        except PoolTimeout as exc:
            if bounded:
                raise deadline.expired("a PostgreSQL connection") from exc
            raise

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection outside any transaction (short-lived advisory locks)."""
        try:
            conn = self._checkout()
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"PostgreSQL unavailable: {exc}") from exc
        try:
            yield conn
        except psycopg.OperationalError as exc:
            if isinstance(exc, psycopg.errors.QueryCanceled) and deadline.left() is not None:
                # The statement timeout a transaction under a deadline sets
                # (`pigeon.storage.postgres_tx`): what the deadline's own wait raises.
                raise deadline.expired("PostgreSQL's answer") from exc
            # Disk full, a deadlock victim, a lock wait run out, the server gone: each in
            # pigeon's words (``pigeon.storage.errors``). A statement's own fault passes.
            raise from_postgres(exc) from exc
        finally:
            self.pool.putconn(conn)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PostgresTx]:
        """A transaction whose BEGIN, savepoints and COMMIT travel with its statements
        (`pigeon.storage.postgres_tx`)."""
        with self.connection() as conn, transaction_on(conn, self.queries, self.cipher) as tx:
            yield tx

    def reading(self) -> contextlib.AbstractContextManager[PostgresTx]:
        """A read transaction (``Database.reading``): PostgreSQL's readers take no lock a
        writer waits for."""
        return self.transaction()

    def dedicated_connection(self) -> Connection:
        """A new autocommit connection of its own, outside the pool, for the caller to close.

        For what holds a connection indefinitely (``LISTEN``): borrowing a pooled one for
        that would shrink the pool the transactions share.
        """
        try:
            return Connection.connect(
                self.url,
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=self.connect_timeout,
            )
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc

    def close(self) -> None:
        self.pool.close()


def probe(url: str, connect_timeout: int) -> None:
    """One plain connection to ``url``, closed at once, or ``StoreUnavailable`` naming the
    cause (the first line of libpq's message). For a caller about to open a pool: a pool
    that cannot connect retries for its whole timeout, logging each attempt, and then
    names only the timeout. ``connect_timeout``: whole seconds (libpq's unit)."""
    try:
        psycopg.connect(url, connect_timeout=connect_timeout).close()
    except psycopg.Error as exc:  # also a malformed URL, not only an unreachable server
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise StoreUnavailable(
            f"cannot connect to PostgreSQL: {reason or type(exc).__name__}"
        ) from exc
