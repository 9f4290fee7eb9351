"""SQLAlchemy 2 sessions as the claims' unit of work, and pigeon's jobs deferred in them.

pigeon's ``Tx`` runs on the session's own DB-API connection, in the transaction the
session holds (`pigeon.storage.server.borrow`): SQLite's and psycopg's connections as
they are, and inside ``AsyncSession.run_sync`` the synchronous adapter SQLAlchemy puts
over psycopg's ``AsyncConnection`` (``postgresql+psycopg``) or aiosqlite. So the claim,
the handler's ORM writes, ``defer``'s jobs and the stored response are one commit.

While pigeon holds a key in a session, the session refuses a commit that is not
pigeon's: a handler that committed itself would commit its effect without the answer a
retry must replay, and a crash there would run it twice.

On PostgreSQL the stored answer goes with the COMMIT in one round trip: the session's
commit runs as SQLAlchemy's (its flushes, its events), and at its very end, where the
driver would send COMMIT, the answer's statement and the COMMIT are sent together in
psycopg's pipeline mode (``pigeon.storage.postgres.commit_with``). Elsewhere the answer
is written, its row read, then the session commits.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event, util
from sqlalchemy.exc import UnboundExecutionError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from pigeon.exceptions import InvalidOperation
from pigeon.integrations.claims import Finish
from pigeon.jobs.app import App
from pigeon.jobs.job import JobId, JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.storage.base import Tx
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import borrow, server_queries

T = TypeVar("T")

HELD = "pigeon.held"  # session.info: pigeon holds a key in this session's transaction
COMMITTING = "pigeon.committing"  # session.info: the commit under way is pigeon's
KEYRING = "pigeon.keyring"  # session.info: what pigeon's writes in it are sealed with
LAST = "pigeon.last"  # connection.info: the statement to send with the coming COMMIT
# Run a coroutine from SQLAlchemy's synchronous code over an asyncio driver (its greenlet):
# ``await_`` since SQLAlchemy 2.1, ``await_only`` before.
_await: Callable[[Any], Any] = getattr(util, "await_", None) or util.await_only


def session_tx(session: Session) -> Tx:
    """pigeon's ``Tx`` over ``session``'s transaction (begun now if it was not)."""
    fairy = session.connection().connection
    driver, dbapi = fairy.driver_connection, fairy.dbapi_connection
    keyring: Keyring | None = session.info.get(KEYRING)
    if driver is dbapi:
        return borrow(driver, keyring=keyring, begin=True)
    return borrow(driver, keyring=keyring, via=dbapi, begin=True)


@event.listens_for(Session, "before_commit")
def _pigeons_to_commit(session: Session) -> None:
    if session.info.get(HELD) and not session.info.get(COMMITTING):
        raise InvalidOperation(
            "an @idempotent handler must not commit: pigeon commits its writes together "
            "with the stored response once it returns"
        )


def _postgres() -> Any:
    """``pigeon.storage.postgres`` where psycopg can pipeline, else None."""
    try:
        from pigeon.storage import postgres
    except ImportError:  # no psycopg: no PostgreSQL connection either
        return None
    return postgres if postgres.pipelines() else None


def _send_with_commit(connection: Connection) -> None:
    """SQLAlchemy's ``commit`` event, right before the driver's commit: the statement
    left for it goes with the COMMIT in one round trip; the driver's commit that follows
    finds nothing left to commit."""
    pending: tuple[str, Mapping[str, Any]] | None = connection.info.pop(LAST, None)
    if pending is None:
        return
    postgres, fairy = _postgres(), connection.connection
    driver = fairy.driver_connection
    if postgres.borrowable(driver):
        postgres.commit_with(driver, *pending)
    else:  # an AsyncConnection, under SQLAlchemy's synchronous adapter (in its greenlet)
        _await(postgres.commit_with_async(driver, *pending))


def _sent(left: dict[Any, Any]) -> None:
    """A commit that did not send the statement left for it never happens above (see
    ``SessionWork._sends_the_commit``); if one did, say so loudly."""
    if LAST in left:
        raise RuntimeError(
            "pigeon's stored answer was not sent with the session's commit: the session "
            "committed without psycopg's COMMIT"
        )


_listening: weakref.WeakSet[Engine] = weakref.WeakSet()
_listening_lock = threading.Lock()


def _listen(engine: Engine) -> None:
    with _listening_lock:
        if engine not in _listening:
            event.listen(engine, "commit", _send_with_commit)
            _listening.add(engine)


class SessionWork:
    """A ``Session`` as ``pigeon.integrations.claims.UnitOfWork``."""

    def __init__(self, session: Session, keyring: Keyring | None = None) -> None:
        self.session = session
        if keyring is not None:
            session.info[KEYRING] = keyring

    def run(self, work: Callable[[Tx], T]) -> T:
        self.session.flush()  # the handler's ORM writes first: their errors are its own
        self.session.info[HELD] = True
        return work(session_tx(self.session))

    def commit(self, last: Finish) -> None:
        self.session.info[COMMITTING] = True
        left: dict[Any, Any] = {}
        try:
            left = self.leave(last)
            self.session.commit()
            _sent(left)
        finally:
            left.pop(LAST, None)  # not sent: the commit did not get that far
            self._let_go()

    def leave(self, last: Finish) -> dict[Any, Any]:
        """``last``'s statement, left for the commit's round trip in the connection's
        ``info`` it returns (PostgreSQL), or run now (an empty dict)."""
        statement = self.run(last)
        connection = self.session.connection()
        if not self._sends_the_commit(connection):
            statement.execute(session_tx(self.session))
            return {}
        _listen(connection.engine)
        text = server_queries("postgres")[statement.name]
        connection.info[LAST] = (text, statement.params)
        return connection.info

    def _sends_the_commit(self, connection: Connection) -> bool:
        """Will the session's commit be psycopg's COMMIT of ``connection``? Not for a
        session bound to a connection of the application's (whose transaction it may
        only join), nor a two-phase one: the statement then runs before the commit."""
        postgres = _postgres()
        if postgres is None or self.session.twophase:
            return False
        try:
            if not isinstance(self.session.get_bind(), Engine):
                return False
        except UnboundExecutionError:  # binds per mapper, no default one
            return False
        driver = connection.connection.driver_connection
        return bool(postgres.borrowable(driver) or postgres.borrowable_async(driver))

    def rollback(self) -> None:
        try:
            self.session.rollback()
        finally:
            self._let_go()

    def _let_go(self) -> None:
        self.session.info.pop(HELD, None)
        self.session.info.pop(COMMITTING, None)


class AsyncSessionWork:
    """An ``AsyncSession`` as ``pigeon.integrations.claims.AsyncUnitOfWork``."""

    def __init__(self, session: AsyncSession, keyring: Keyring | None = None) -> None:
        self.session = session
        self.sync = SessionWork(session.sync_session, keyring)

    async def run(self, work: Callable[[Tx], T]) -> T:
        return await self.session.run_sync(lambda _: self.sync.run(work))

    async def commit(self, last: Finish) -> None:
        self.session.sync_session.info[COMMITTING] = True
        left: dict[Any, Any] = {}
        try:
            left = await self.session.run_sync(lambda _: self.sync.leave(last))
            await self.session.commit()
            _sent(left)
        finally:
            left.pop(LAST, None)
            self.sync._let_go()

    async def rollback(self) -> None:
        try:
            await self.session.rollback()
        finally:
            self.sync._let_go()


def defer(
    session: Session,
    spec: JobSpec | None = None,
    *,
    queue: str | None = None,
    task: str | None = None,
    payload: dict[str, Any] | None = None,
    app: App | None = None,
    **options: Any,
) -> JobId:
    """Enqueue a pigeon job in ``session``'s transaction (``pigeon.jobs.enqueue``): it
    exists once the session commits, with the handler's writes, and never without them.
    ``app``: check it against the app's tasks and take their retry policies."""
    return enqueue(
        session_tx(session), spec, queue=queue, task=task, payload=payload, app=app, **options
    )


async def defer_async(
    session: AsyncSession,
    spec: JobSpec | None = None,
    *,
    queue: str | None = None,
    task: str | None = None,
    payload: dict[str, Any] | None = None,
    app: App | None = None,
    **options: Any,
) -> JobId:
    """``defer`` for an ``AsyncSession``."""

    def enqueue_in(sync: Session) -> JobId:
        return defer(sync, spec, queue=queue, task=task, payload=payload, app=app, **options)

    return await session.run_sync(enqueue_in)
