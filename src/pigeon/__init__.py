"""pigeon: what a user did is never lost and never done twice.

The names below load their modules on first use: ``import pigeon`` costs a few
milliseconds, and a device that only queues never imports the sync engine's HTTP client."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pigeon.exceptions import (
    AccessRevoked,
    AuthorizationRequired,
    BatchRefused,
    CiphertextInvalid,
    ConfigurationError,
    ConflictError,
    DeliveryError,
    EmptyEntity,
    ForeignDatabase,
    InvalidIdempotencyKey,
    InvalidOperation,
    InvalidState,
    JobTimeout,
    KeyInProgress,
    KeyMissing,
    NotFound,
    NotSent,
    PayloadInvalid,
    PayloadNotSerializable,
    PayloadTooLarge,
    PermanentError,
    PigeonError,
    RetryableError,
    SchemaTooNew,
    SchemaTooOld,
    StorageFull,
    StoreError,
    StoreUnavailable,
    UnknownOperationType,
    UnknownOutcome,
)
from pigeon.lazy import lazy_names

if TYPE_CHECKING:
    from pigeon.core.clock import HLCTimestamp, HybridLogicalClock
    from pigeon.core.operation import Operation, OpStatus, OpType
    from pigeon.core.retry import RetryPolicy
    from pigeon.edge.merge import field_merge, notes_merge
    from pigeon.edge.options import QueueOptions
    from pigeon.edge.queue import OfflineQueue, QueueStats
    from pigeon.protocol.http import HttpTransport
    from pigeon.protocol.inprocess import InProcessTransport
    from pigeon.protocol.transport import Transport
    from pigeon.storage.crypto import Keyring
    from pigeon.sync.connectivity import ConnectivityMonitor, ManualMonitor, ProbeMonitor
    from pigeon.sync.engine import SyncEngine
    from pigeon.sync.events import DeadTail, SyncCallbacks
    from pigeon.sync.options import SyncOptions
    from pigeon.sync.resolver import ConflictPolicy, ConflictResolver, Strategy

# Each public name (exceptions aside) and the module that defines it.
_LAZY = {
    "ConflictResolver": "pigeon.sync.resolver",
    "ConnectivityMonitor": "pigeon.sync.connectivity",
    "DeadTail": "pigeon.sync.events",
    "HLCTimestamp": "pigeon.core.clock",
    "HttpTransport": "pigeon.protocol.http",
    "HybridLogicalClock": "pigeon.core.clock",
    "InProcessTransport": "pigeon.protocol.inprocess",
    "Keyring": "pigeon.storage.crypto",
    "ManualMonitor": "pigeon.sync.connectivity",
    "OfflineQueue": "pigeon.edge.queue",
    "OpStatus": "pigeon.core.operation",
    "OpType": "pigeon.core.operation",
    "Operation": "pigeon.core.operation",
    "ConflictPolicy": "pigeon.sync.resolver",
    "ProbeMonitor": "pigeon.sync.connectivity",
    "QueueOptions": "pigeon.edge.options",
    "QueueStats": "pigeon.edge.queue",
    "RetryPolicy": "pigeon.core.retry",
    "Strategy": "pigeon.sync.resolver",
    "SyncCallbacks": "pigeon.sync.events",
    "SyncEngine": "pigeon.sync.engine",
    "SyncOptions": "pigeon.sync.options",
    "Transport": "pigeon.protocol.transport",
    "field_merge": "pigeon.edge.merge",
    "notes_merge": "pigeon.edge.merge",
}

__version__ = "0.1.0"

__all__ = [
    "AccessRevoked",
    "AuthorizationRequired",
    "BatchRefused",
    "CiphertextInvalid",
    "ConfigurationError",
    "ConflictError",
    "ConflictPolicy",
    "ConflictResolver",
    "ConnectivityMonitor",
    "DeadTail",
    "DeliveryError",
    "EmptyEntity",
    "ForeignDatabase",
    "HLCTimestamp",
    "HttpTransport",
    "HybridLogicalClock",
    "InProcessTransport",
    "InvalidIdempotencyKey",
    "InvalidOperation",
    "InvalidState",
    "JobTimeout",
    "KeyInProgress",
    "KeyMissing",
    "Keyring",
    "ManualMonitor",
    "NotFound",
    "NotSent",
    "OfflineQueue",
    "OpStatus",
    "OpType",
    "Operation",
    "PayloadInvalid",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PermanentError",
    "PigeonError",
    "ProbeMonitor",
    "QueueOptions",
    "QueueStats",
    "RetryPolicy",
    "RetryableError",
    "SchemaTooNew",
    "SchemaTooOld",
    "StorageFull",
    "StoreError",
    "StoreUnavailable",
    "Strategy",
    "SyncCallbacks",
    "SyncEngine",
    "SyncOptions",
    "Transport",
    "UnknownOperationType",
    "UnknownOutcome",
    "__version__",
    "field_merge",
    "notes_merge",
]

__getattr__, __dir__ = lazy_names(globals(), _LAZY)
