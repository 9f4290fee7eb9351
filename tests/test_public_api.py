"""The public API is exactly what we mean to export, and every name in it resolves."""

import pigeon

EXPECTED = {
    "AccessRevoked",
    "ConflictResolver",
    "ConflictPolicy",
    "Strategy",
    "field_merge",
    "notes_merge",
    "OfflineQueue",
    "QueueStats",
    "RetryPolicy",
    "JobTimeout",
    "HttpTransport",
    "InProcessTransport",
    "Transport",
    "ConnectivityMonitor",
    "ManualMonitor",
    "ProbeMonitor",
    "SyncEngine",
    "SyncOptions",
    "SyncCallbacks",
    "DeadTail",
    "QueueOptions",
    "AuthorizationRequired",
    "ConfigurationError",
    "ConflictError",
    "DeliveryError",
    "EmptyEntity",
    "ForeignDatabase",
    "HLCTimestamp",
    "HybridLogicalClock",
    "InvalidOperation",
    "InvalidIdempotencyKey",
    "InvalidState",
    "KeyInProgress",
    "Keyring",
    "KeyMissing",
    "CiphertextInvalid",
    "SchemaTooOld",
    "NotSent",
    "BatchRefused",
    "NotFound",
    "OpStatus",
    "OpType",
    "Operation",
    "PayloadInvalid",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PermanentError",
    "PigeonError",
    "RetryableError",
    "SchemaTooNew",
    "StorageFull",
    "StoreError",
    "StoreUnavailable",
    "UnknownOperationType",
    "UnknownOutcome",
    "__version__",
}


def test_all_is_exactly_the_curated_api() -> None:
    assert set(pigeon.__all__) == EXPECTED
    assert len(pigeon.__all__) == len(set(pigeon.__all__))


def test_every_exported_name_resolves() -> None:
    for name in pigeon.__all__:
        assert getattr(pigeon, name) is not None, name


def test_exception_tree() -> None:
    assert issubclass(pigeon.KeyInProgress, pigeon.RetryableError)
    assert issubclass(pigeon.NotSent, pigeon.RetryableError)
    assert issubclass(pigeon.BatchRefused, pigeon.DeliveryError)
    for cls in (
        pigeon.RetryableError,
        pigeon.PermanentError,
        pigeon.ConflictError,
        pigeon.UnknownOutcome,
        pigeon.AuthorizationRequired,
    ):
        assert issubclass(cls, pigeon.DeliveryError)
    assert issubclass(pigeon.PayloadTooLarge, ValueError)
    for cls in (pigeon.PayloadNotSerializable, pigeon.PayloadTooLarge):
        assert issubclass(cls, pigeon.PayloadInvalid)
    assert issubclass(pigeon.PayloadInvalid, pigeon.InvalidOperation)
    assert issubclass(pigeon.StorageFull, pigeon.StoreError)
    assert issubclass(pigeon.AccessRevoked, pigeon.PermanentError)
    assert issubclass(pigeon.DeliveryError, pigeon.PigeonError)


def test_server_api() -> None:
    import pigeon.server

    assert set(pigeon.server.__all__) == {
        "BearerAuth",
        "IdempotencyMiddleware",
        "IdempotencyPolicy",
        "IdempotencyStore",
        "Intake",
        "IntakeContext",
        "IntakeOptions",
        "ServerOptions",
        "ValidationError",
        "create_app",
    }
    for name in pigeon.server.__all__:
        assert getattr(pigeon.server, name) is not None


def test_the_reference_app_lives_apart_from_the_server() -> None:
    import pigeon.reference
    import pigeon.server

    assert set(pigeon.reference.__all__) == {"create_notes_app", "read_ledger"}
    for name in pigeon.reference.__all__:
        assert not hasattr(pigeon.server, name)


def test_jobs_api_resolves() -> None:
    import pigeon.jobs

    for name in pigeon.jobs.__all__:
        assert getattr(pigeon.jobs, name) is not None, name
