"""Every error pigeon raises, in one tree.

PigeonError
├── InvalidOperation            bad input; nothing was stored
│   ├── PayloadInvalid          a payload pigeon cannot store or send (e.g. nested too deep,
│   │   │                       a field its task does not declare)
│   │   ├── PayloadNotSerializable
│   │   └── PayloadTooLarge
│   ├── EmptyEntity
│   ├── UnknownOperationType
│   ├── InvalidIdempotencyKey   server: missing or malformed key; nothing executed
│   └── ValidationError         server: a body invalid for its route; refused before the
│                               key is claimed, so nothing is stored under it
├── StoreError                  the database file cannot be used as asked
│   ├── ForeignDatabase         not a pigeon file of this kind; never rewritten
│   ├── SchemaTooNew            written by a newer pigeon; never rewritten
│   ├── SchemaTooOld            older, and upgrading it was not allowed; never rewritten
│   ├── StoreUnavailable        cannot reach or lock the database
│   │   ├── Contention          a deadlock / serialization victim: run the transaction again
│   │   └── LockTimeout         a bounded lock wait ran out (another transaction holds it)
│   └── StorageFull             the disk (or the database's size limit) is full; the
│                               transaction rolled back, nothing of it was written
├── NotFound                    no such operation / job / record
├── InvalidState                the object exists but not in a state that allows this
├── ConfigurationError          a policy or config value is out of order
│   └── MissingExtra            an optional part used without its extra installed
├── JobTimeout                  a job overran its timeout; retried like any failure
└── DeliveryError               the outcome of sending one operation
    ├── RetryableError          send again later with the SAME key
    │   ├── KeyInProgress       409: the server is still running that key
    │   └── NotSent             nothing left this process (a token callable raised)
    ├── PermanentError          will never succeed; dead-letter it (a job: the failed store)
    │   └── AccessRevoked       a job's principal lost access before it ran; never retried
    ├── ConflictError           version conflict; hand to the resolver
    ├── AuthorizationRequired   401/403; pause the queue, do not burn attempts
    ├── UnknownOutcome          may or may not have happened; reconcile, never re-mint
    └── BatchRefused            a batch refused as a whole (no batch route); pause the queue
"""

from __future__ import annotations


class PigeonError(Exception):
    """Base of every error pigeon raises."""


class InvalidOperation(PigeonError, ValueError):
    """The operation was refused at the door; nothing was stored."""


class PayloadInvalid(InvalidOperation):
    """A payload that cannot be stored or sent as it is: nested deeper than the wire
    allows (``pigeon.core.wire.MAX_JSON_DEPTH``), or carrying a field its job task
    does not declare. The parent of the other payload errors."""


class PayloadNotSerializable(PayloadInvalid):
    pass


class UpcastFailed(PayloadInvalid):
    """A job's payload could not be brought to its task's version: no upcaster from its
    version (the task dropped it), an upcaster that raised, or a result the task does not
    take (``pigeon.jobs.versions``). Permanent: it would fail the same way again."""


class PayloadTooLarge(PayloadInvalid):
    pass


class EmptyEntity(InvalidOperation):
    pass


class UnknownOperationType(InvalidOperation):
    pass


class InvalidIdempotencyKey(InvalidOperation):
    """The Idempotency-Key is missing or malformed; nothing was executed."""


class ValidationError(InvalidOperation):
    """A request invalid for its route, raised by the route's declared validation.

    Raised before the key is claimed: the refusal (``status``, 400 by default, or 422) is
    answered as problem+json of type ``slug`` and nothing is stored, so the client can
    correct the request and send it again under the same key.
    """

    def __init__(self, detail: str, *, slug: str = "invalid-request", status: int = 400) -> None:
        if status not in (400, 422):
            raise ValueError(f"a validation error answers 400 or 422, not {status}")
        super().__init__(detail)
        self.detail = detail
        self.slug = slug
        self.status = status


class StoreError(PigeonError):
    """The database cannot be used as asked."""


class ForeignDatabase(StoreError):
    pass


class SchemaTooNew(StoreError):
    pass


class SchemaTooOld(StoreError):
    """An older schema, opened by something that must not upgrade it (``pigeon queue``:
    an inspecting tool must not move a file beyond the pigeon of the app that owns it)."""


class StoreUnavailable(StoreError):
    pass


class Contention(StoreUnavailable):
    """The database aborted the transaction to break a deadlock or a serialization
    conflict (PostgreSQL 40P01 / 40001). Nothing of it committed and the other transaction
    has gone on: running the whole transaction again is the cure
    (``pigeon.storage.errors.retried``)."""


class LockTimeout(StoreUnavailable):
    """A bounded wait for a row or table lock ran out (PostgreSQL 55P03,
    ``lock_not_available``): another transaction holds what this one needs."""


class StorageFull(StoreError):
    """The database could not grow: the disk is full, or SQLite reached its
    ``max_page_count`` (SQLITE_FULL), or PostgreSQL reported ``disk_full`` (53100). Raised
    by the storage layer for every store, after the transaction rolled back, so nothing of
    it was written; freeing space and trying again is safe."""


class KeyMissing(StoreError):
    """A value was sealed (encrypted at rest) under a key id the keyring does not hold."""

    def __init__(self, kid: str, where: str = "") -> None:
        self.kid = kid
        at = f" ({where})" if where else ""
        super().__init__(
            f"value sealed with key id {kid!r}{at}, which is not in the keyring: add that "
            f"key (PIGEON_KEYS / --keys-file) to read it"
        )


class CiphertextInvalid(StoreError):
    """A sealed value failed authentication: tampered, truncated, or moved from another
    row or column."""


class NotFound(PigeonError, LookupError):
    pass


class InvalidState(PigeonError):
    pass


class ConfigurationError(PigeonError, ValueError):
    """A setting refused: out of range, out of order, or contradicting another. ``field``
    names the setting to blame when there is one (``max_body``), so that a command can
    point at its own option for it."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class MissingExtra(ConfigurationError, ImportError):
    """An optional part of pigeon (the server, PostgreSQL, a broker, CRDT documents) used
    without its extra installed; the message names the extra to install."""


class JobTimeout(PigeonError, TimeoutError):
    pass


class DeliveryError(PigeonError):
    """The outcome of one delivery attempt that did not succeed."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        body: object = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.body = body


class RetryableError(DeliveryError):
    pass


class KeyInProgress(RetryableError):
    pass


class NotSent(RetryableError):
    """The request could not even be made here (e.g. the token callable raised): not a
    byte left this process, so the server cannot have seen it. Like a refused connection
    it spends no attempt; unlike one, it says nothing about the server's reachability.
    The original exception is the ``__cause__``."""


class BatchRefused(DeliveryError):
    """The server (or a proxy before it) refused a batch request as a whole: 404/405 (no
    batch route), 400 (it does not read our batch), or another 4xx not about the
    operations. None of them was applied, and sending them the same way again cannot help
    until the server or the client's configuration changes: the engine pauses the queue
    with this reason (as for 401/403) and spends no attempt, rather than letting every
    operation run out of attempts into the dead letters."""


class PermanentError(DeliveryError):
    pass


class AccessRevoked(PermanentError):
    """A task's access re-check (``@app.task(access=...)``) refused its job before the
    work ran: the principal it acts for no longer has access. The job goes to the failed
    store with its owner at once, whatever the app counts as permanent."""


class ConflictError(DeliveryError):
    pass


class AuthorizationRequired(DeliveryError):
    pass


class UnknownOutcome(DeliveryError):
    pass
