"""Django's transactions as pigeon's: ``transaction.atomic`` on a database alias as the
claims' unit of work, pigeon's ``Tx`` over the open block, jobs deferred in it, and an
alias as pigeon's ``Database`` (the admin's reviews).

pigeon's statements run on the alias's own DB-API connection (``connections[alias]
.connection``: sqlite3's or psycopg's) inside the block Django opened, through
`pigeon.storage.server.borrow`: the claim, the view's ORM writes, the jobs and the
stored response are one commit of Django's transaction.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.transaction import TransactionManagementError

from pigeon.exceptions import ConfigurationError, InvalidOperation
from pigeon.integrations.claims import Finish
from pigeon.jobs.effects import effect_in
from pigeon.jobs.job import JobId, JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.storage.base import Tx
from pigeon.storage.crypto import Keyring, cipher_for
from pigeon.storage.server import borrow

T = TypeVar("T")

# Django's vendor names, pigeon's backends.
VENDORS = {"sqlite": "sqlite", "postgresql": "postgres"}


def alias_tx(using: str = DEFAULT_DB_ALIAS, keyring: Keyring | None = None) -> Tx:
    """pigeon's ``Tx`` over the transaction open on ``using`` (inside ``atomic()``):
    ``jobs.records.accept(alias_tx(), ...)`` writes a record and its obligations there."""
    connection = connections[using]
    if not connection.in_atomic_block:
        raise InvalidOperation(
            "pigeon writes in the transaction that is open: call it inside an @idempotent "
            "view or a transaction.atomic() block"
        )
    if connection.vendor not in VENDORS:
        raise ConfigurationError(f"pigeon runs on SQLite and PostgreSQL, not {connection.vendor}")
    connection.ensure_connection()
    return borrow(connection.connection, keyring=keyring)


def defer(
    spec: JobSpec | None = None,
    *,
    queue: str | None = None,
    task: str | None = None,
    payload: dict[str, Any] | None = None,
    using: str = DEFAULT_DB_ALIAS,
    **options: Any,
) -> JobId:
    """Enqueue a pigeon job in the open transaction of ``using`` (``pigeon.jobs.enqueue``):
    it exists once the view's transaction commits, with its ORM writes, and never without
    them. It is checked against ``PIGEON["JOBS_APP"]``'s tasks when one is set."""
    from pigeon.integrations.django.conf import configured  # settings read when used

    conf = configured()
    return enqueue(
        alias_tx(using, conf.keyring),
        spec,
        queue=queue,
        task=task,
        payload=payload,
        app=options.pop("app", None) or conf.app(),
        **options,
    )


def orm_effect(
    scope: str, key: str, mutation: Callable[[], T], *, using: str = DEFAULT_DB_ALIAS
) -> T:
    """An atomic effect of ORM writes (`pigeon.jobs.effects`): (``scope``, ``key``)
    claimed, ``mutation`` (the writes) run and its JSON result stored, in one
    ``transaction.atomic(using)``; run again for the same key (its job run again after a
    crash, or a twin), it returns the stored result and writes nothing. Inside an open
    atomic block it joins it; a mutation that raises leaves neither its writes nor its
    claim."""
    from pigeon.integrations.django.conf import configured  # settings read when used

    with transaction.atomic(using=using):
        tx = alias_tx(using, configured().keyring)
        return effect_in(tx, scope, key, lambda _: mutation(), now=time.time())


class AtomicWork:
    """``transaction.atomic(using=...)`` as ``pigeon.integrations.claims.UnitOfWork``:
    the first ``run`` opens the block (the outermost: pigeon commits it), ``commit`` and
    ``rollback`` close it, and a later ``run`` opens the next one."""

    def __init__(self, using: str, keyring: Keyring | None = None) -> None:
        self.using = using
        self.keyring = keyring
        self._block: Any = None

    def run(self, work: Callable[[Tx], T]) -> T:
        if self._block is None:
            if _in_outer_block(self.using):
                raise ConfigurationError(
                    f"an @idempotent view on database {self.using!r} runs in a transaction "
                    "of its own, which pigeon commits with the stored response: not inside "
                    "another atomic block (ATOMIC_REQUESTS: @idempotent views are left out "
                    "of it; call them from no atomic() of your own)"
                )
            block = transaction.atomic(using=self.using, durable=True)
            block.__enter__()
            self._block = block
        return work(alias_tx(self.using, self.keyring))

    def commit(self, last: Finish) -> None:
        self.run(last).execute(alias_tx(self.using, self.keyring))
        block, self._block = self._block, None
        if connections[self.using].needs_rollback:
            # The view caught a database error inside the block and went on: Django would
            # roll back silently on leaving it, and the answer would claim a commit.
            block.__exit__(None, None, None)
            raise TransactionManagementError(
                "the view caught a database error and went on: its transaction cannot "
                "commit, so nothing of it did (wrap what may fail in an atomic() of its own)"
            )
        block.__exit__(None, None, None)

    def rollback(self) -> None:
        block, self._block = self._block, None
        if block is None:
            return
        transaction.set_rollback(True, using=self.using)
        block.__exit__(None, None, None)


def _in_outer_block(using: str) -> bool:
    """Is an atomic block open on ``using``, besides the ones Django's ``TestCase`` opens
    around each test (whose ``durable`` check Django skips as well)?"""
    blocks = connections[using].atomic_blocks
    return any(not getattr(block, "_from_testcase", False) for block in blocks)


class AliasDatabase:
    """One of Django's database aliases as pigeon's ``Database``: each transaction an
    ``atomic()`` block (a savepoint inside one already open), for pigeon's stores
    (``FailedStore``, ``records.get``) on Django's connection."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS, keyring: Keyring | None = None) -> None:
        self.using = using
        self.keyring = keyring
        self.cipher = cipher_for(keyring)
        self.backend = VENDORS[connections[using].vendor]

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        with transaction.atomic(using=self.using):
            yield alias_tx(self.using, self.keyring)

    def reading(self) -> contextlib.AbstractContextManager[Tx]:
        return self.transaction()

    def close(self) -> None:
        """Django owns the connection."""
