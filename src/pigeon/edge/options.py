"""`QueueOptions`: how an `OfflineQueue` keeps its file, one frozen value checked when it
is made (so a bad setting fails where it is written, before any file is opened), shared by
the library and the CLI.

    queue = OfflineQueue("outbox.db", QueueOptions(durability="normal", keep_delivered=None))
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from pigeon.checks import is_int
from pigeon.core.operation import OpType
from pigeon.core.retry import RetryPolicy
from pigeon.edge import owners, retention
from pigeon.exceptions import ConfigurationError

Durability = Literal["full", "normal"]


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """``retry_policy``: backoff and limits of failed attempts. ``durability``: "full"
    fsyncs every commit, "normal" may lose the last commits to an OS crash (never to an
    app crash). ``max_payload_bytes``: the largest payload enqueue takes (JSON text).
    ``allowed_types``: operation types enqueue takes (None: any). ``coalesce``: fold an
    operation into its entity's unsent tail. ``keep_delivered``: seconds a delivered
    operation stays in the file before the queue purges it by itself (None: until
    ``purge_delivered``). ``create``: make the file if missing. ``recover``: put back the
    in-flight operations of queues that are gone, on open and every ``recover_every``
    seconds (``math.inf``: on open only). ``upgrade``: migrate a file of an older schema
    (False: refuse it with SchemaTooOld, as tools that only look should)."""

    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    durability: Durability = "full"
    max_payload_bytes: int = 1 << 20
    allowed_types: Collection[str | OpType] | None = None
    coalesce: bool = True
    keep_delivered: float | None = retention.DEFAULT_KEEP_DELIVERED
    create: bool = True
    recover: bool = True
    recover_every: float = owners.CHECK_EVERY
    upgrade: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.retry_policy, RetryPolicy):
            raise ConfigurationError(
                f"retry_policy must be a RetryPolicy, not {self.retry_policy!r}"
            )
        if self.durability not in ("full", "normal"):
            raise ConfigurationError(
                f"durability must be 'full' or 'normal', not {self.durability!r}"
            )
        if not is_int(self.max_payload_bytes) or self.max_payload_bytes <= 0:
            raise ConfigurationError(
                f"max_payload_bytes must be a positive integer, not {self.max_payload_bytes!r}"
            )
        if self.allowed_types is not None:
            types = frozenset(t.value if isinstance(t, OpType) else t for t in self.allowed_types)
            if not types or not all(isinstance(t, str) and t for t in types):
                raise ConfigurationError(
                    f"allowed_types must be non-empty strings, not {sorted(types)!r}"
                )
            object.__setattr__(self, "allowed_types", types)
        object.__setattr__(self, "keep_delivered", retention.check_keep(self.keep_delivered))
        object.__setattr__(self, "recover_every", owners.check_every(self.recover_every))

    @property
    def types(self) -> frozenset[str] | None:
        """``allowed_types`` as the set of their names (None: any type)."""
        types = self.allowed_types
        return None if types is None else frozenset(str(t) for t in types)

    @classmethod
    def inspecting(cls) -> QueueOptions:
        """For tools that only look (``pigeon queue``, ``pigeon conflicts``): the file must
        exist, is not migrated, and no operation of a running queue is taken over."""
        return cls(create=False, recover=False, upgrade=False)
