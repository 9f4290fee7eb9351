"""The public API is exactly what we mean to export, and every name in it resolves."""

import pigeon

EXPECTED = {
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
    "AuthorizationRequired",
    "ConfigurationError",
    "ConflictError",
    "DeliveryError",
    "EmptyEntity",
    "ForeignDatabase",
    "HLCTimestamp",
    "HybridLogicalClock",
    "InvalidOperation",
    "InvalidState",
    "KeyInProgress",
    "NotFound",
    "OpStatus",
    "OpType",
    "Operation",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PermanentError",
    "PigeonError",
    "RetryableError",
    "SchemaTooNew",
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
    for cls in (
        pigeon.RetryableError,
        pigeon.PermanentError,
        pigeon.ConflictError,
        pigeon.UnknownOutcome,
        pigeon.AuthorizationRequired,
    ):
        assert issubclass(cls, pigeon.DeliveryError)
    assert issubclass(pigeon.PayloadTooLarge, ValueError)
    assert issubclass(pigeon.DeliveryError, pigeon.PigeonError)
