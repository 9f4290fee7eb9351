"""What the jobs store and its callers share beneath both: the ledger's states and how a
JSON value sits in a text column.

Both the store implementations (``pigeon.jobs.stores``) and the modules that call them
(``ledger``, ``records``, ``effects``, ...) import this module, and it imports neither, so
neither side reaches the other through it.
"""

from __future__ import annotations

import json
from typing import Any

# Record states (pigeon_record_events.state), in the order they usually happen.
ACCEPTED = "accepted"
ATTEMPT = "attempt"
PROVIDER_RESULT = "provider_result"
OBLIGATION_COMPLETED = "obligation_completed"
OBLIGATION_FAILED = "obligation_failed"
OBLIGATION_RETRIED = "obligation_retried"
OBLIGATION_CANCELLED = "obligation_cancelled"
COMPLETED = "completed"

# The ledger state recorded when an obligation moves to a status.
SETTLED_STATE = {
    "completed": OBLIGATION_COMPLETED,
    "failed": OBLIGATION_FAILED,
    "pending": OBLIGATION_RETRIED,
    "cancelled": OBLIGATION_CANCELLED,
}


def dumps(value: Any) -> str:
    """``value`` as the JSON text a column keeps (sorted keys, compact)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def loads(text: str | None) -> Any:
    """A JSON column's value; a NULL column (None) stays None."""
    return None if text is None else json.loads(text)
