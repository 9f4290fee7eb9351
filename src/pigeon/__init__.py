"""pigeon: what a user did is never lost and never done twice."""

from __future__ import annotations

from pigeon.clock import HLCTimestamp, HybridLogicalClock
from pigeon.edge.merge import field_merge, notes_merge
from pigeon.edge.operation import Operation, OpStatus, OpType
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue, QueueStats
from pigeon.edge.retry import RetryPolicy
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
from pigeon.protocol.http import HttpTransport
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.protocol.transport import Transport
from pigeon.storage.crypto import Keyring
from pigeon.sync.connectivity import ConnectivityMonitor, ManualMonitor, ProbeMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.events import SyncCallbacks
from pigeon.sync.options import SyncOptions
from pigeon.sync.resolver import ConflictResolver, Policy, Strategy

__version__ = "0.1.0"

__all__ = [
    "AccessRevoked",
    "AuthorizationRequired",
    "BatchRefused",
    "CiphertextInvalid",
    "ConfigurationError",
    "ConflictError",
    "ConflictResolver",
    "ConnectivityMonitor",
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
    "Policy",
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
