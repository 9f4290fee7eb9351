"""pigeon: what a user did is never lost and never done twice."""

from __future__ import annotations

from pigeon.clock import HLCTimestamp, HybridLogicalClock
from pigeon.edge.operation import Operation, OpStatus, OpType
from pigeon.exceptions import (
    AuthorizationRequired,
    ConfigurationError,
    ConflictError,
    DeliveryError,
    EmptyEntity,
    ForeignDatabase,
    InvalidOperation,
    InvalidState,
    KeyInProgress,
    NotFound,
    PayloadNotSerializable,
    PayloadTooLarge,
    PermanentError,
    PigeonError,
    RetryableError,
    SchemaTooNew,
    StoreError,
    StoreUnavailable,
    UnknownOperationType,
    UnknownOutcome,
)

__version__ = "0.1.0"

__all__ = [
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
]
