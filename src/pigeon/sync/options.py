"""`SyncOptions`: how a `SyncEngine` paces itself, one frozen value checked when it is made.

engine = SyncEngine(queue, transport, SyncOptions(cycle_size=50, pipeline=2))
"""

from __future__ import annotations

from dataclasses import dataclass

from pigeon.checks import is_finite, is_int_in
from pigeon.core.retry import RetryPolicy
from pigeon.exceptions import ConfigurationError
from pigeon.sync.connectivity import DEFAULT_PROBE_BACKOFF

MAX_PIPELINE = 16


@dataclass(frozen=True, slots=True)
class SyncOptions:
    """``cycle_size``: how many operations one cycle takes from the queue (at most one per
    entity). ``pipeline``: how many batches may be on the way at once (1 to 16; with 2 the
    next batch is taken and sent while the server works on the previous one, and a third
    is taken meanwhile, to leave as soon as one of them is answered: per-entity order
    holds, the order in which different entities reach the server is given up).
    ``reconnect``: the backoff between connection attempts while the server is unreachable,
    while no request can be made (the token callable raises), and after a step of the
    background loop raised. ``idle_recheck``: seconds, the longest sleep while an
    operation is due but held behind its entity's earlier one. ``batch_window``: seconds
    a backoff timer fires late on purpose, so operations due within it leave in one
    batch."""

    cycle_size: int = 100
    pipeline: int = 1
    reconnect: RetryPolicy = DEFAULT_PROBE_BACKOFF
    idle_recheck: float = 1.0
    batch_window: float = 0.02

    def __post_init__(self) -> None:
        if not is_int_in(self.pipeline, 1, MAX_PIPELINE):
            raise ConfigurationError(
                f"pipeline must be an integer from 1 to {MAX_PIPELINE}, not {self.pipeline!r}"
            )
        if not is_int_in(self.cycle_size, 1):
            raise ConfigurationError(f"cycle_size must be an integer >= 1, not {self.cycle_size!r}")
        if not isinstance(self.reconnect, RetryPolicy):
            raise ConfigurationError(f"reconnect must be a RetryPolicy, not {self.reconnect!r}")
        if not is_finite(self.idle_recheck) or self.idle_recheck <= 0:
            raise ConfigurationError(f"idle_recheck must be > 0 seconds, not {self.idle_recheck!r}")
        if not is_finite(self.batch_window) or self.batch_window < 0:
            raise ConfigurationError(
                f"batch_window must be >= 0 seconds, not {self.batch_window!r}"
            )
