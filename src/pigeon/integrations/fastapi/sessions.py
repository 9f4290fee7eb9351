"""SQLAlchemy 2 sessions as the claims' unit of work, and pigeon's jobs deferred in them.

pigeon's ``Tx`` runs on the session's own DB-API connection, in the transaction the
session holds (`pigeon.storage.server.borrow`): SQLite's and psycopg's connections as
they are, and inside ``AsyncSession.run_sync`` the synchronous adapter SQLAlchemy puts
over psycopg's ``AsyncConnection`` (``postgresql+psycopg``) or aiosqlite. So the claim,
the handler's ORM writes, ``defer``'s jobs and the stored response are one commit.

While pigeon holds a key in a session, the session refuses a commit that is not
pigeon's: a handler that committed itself would commit its effect without the answer a
retry must replay, and a crash there would run it twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.app import App
from pigeon.jobs.job import JobId, JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.storage.base import Tx
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import borrow

T = TypeVar("T")

HELD = "pigeon.held"  # session.info: pigeon holds a key in this session's transaction
COMMITTING = "pigeon.committing"  # session.info: the commit under way is pigeon's
KEYRING = "pigeon.keyring"  # session.info: what pigeon's writes in it are sealed with


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

    def commit(self) -> None:
        self.session.info[COMMITTING] = True
        try:
            self.session.commit()
        finally:
            self._let_go()

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

    async def commit(self) -> None:
        self.session.sync_session.info[COMMITTING] = True
        try:
            await self.session.commit()
        finally:
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
