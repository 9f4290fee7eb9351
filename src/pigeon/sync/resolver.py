"""The conflict resolver: one strategy per entity type, applied when the server says 412.

    resolver = ConflictResolver(queue, {
        "card": Strategy.FIELD_MERGE,                      # different fields both survive
        "note": ConflictPolicy(Strategy.CUSTOM, merge=notes_merge),  # 3-way: base, local, remote
        "draft": Strategy.USER,                            # conflicted copy, the user decides
        "lww-note": Strategy.LWW,                          # settled on the server
        "doc": Strategy.CRDT,                              # merged on the server
    })
    transport = HttpTransport(url, headers=resolver.headers)   # the device clock, see below
    engine = SyncEngine(queue, transport, resolver=resolver)

The entity type is what comes before the ``:`` of the entity (``card:42`` -> ``card``).
Client-side strategies (field merge, custom merge, user) act on a version conflict: the
server's 412 carries its current state; the base is the state this device last saw
(`pigeon.edge.conflicts.ConflictStore` keeps a snapshot per entity). Server-side
strategies (LWW, CRDT) never see a 412: the server settles, the resolver records what it
said (an LWW write that lost is recorded with the value that beat it).

`resolution_for` is the pure heart: every conflict ends in exactly one of ``merged`` (a new value
built from both sides is sent), ``won`` (this device's value is sent against the current
version), ``lost`` (the server's value stays; this device's edit is recorded) or ``held``
(a conflicted copy waits for the user: ``pigeon conflicts``). A merge function that
raises ends ``held`` too, with the error in the record's detail; the error is then
raised to the engine, which reports it (``last_error``, ``on_error``).

A conflict is never left held without a record: `ConflictHolder` records each one for
the user when the engine has no resolver (strategy ``none``), and `ConflictResolver.sweep`
(run by the engine on start, on its first flush, and after cycles that held conflicts)
takes those over once there is a resolver.

``resolver.headers`` gives the transport the device's clock stamp on every request, so the
server can measure this device's clock offset and correct its operations' stamps
(`pigeon.reference.conflicts`): a phone whose clock is hours off neither wins nor loses by it.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.conflicts import DELETED, NO_RESOLVER
from pigeon.edge.merge import MergeFunction, TieBreak, field_merge
from pigeon.exceptions import ConfigurationError
from pigeon.logs import failure
from pigeon.sync.classify import ReplyOutcome
from pigeon.sync.executor import SyncQueue

log = logging.getLogger("pigeon.sync")

DEVICE_CLOCK = "X-Pigeon-Device-Clock"  # the same name as pigeon.reference.conflicts.DEVICE_CLOCK


class Strategy(enum.StrEnum):
    LWW = "lww"  # server: last write wins by (corrected) hybrid logical clock
    CRDT = "crdt"  # server: Yjs updates merged
    FIELD_MERGE = "field-merge"  # client: field by field, clashes to the tie-break
    CUSTOM = "custom"  # client: a function (base, local, remote) -> merged
    USER = "user"  # client: keep both, hold the entity, let the user choose


SERVER_SIDE = frozenset({Strategy.LWW, Strategy.CRDT})


@dataclass(frozen=True, slots=True)
class ConflictPolicy:
    """How one entity type resolves. ``tie``: for FIELD_MERGE, who wins a field both sides
    changed ("local", "remote" or a function). ``merge``: the CUSTOM function."""

    strategy: Strategy
    tie: TieBreak = "remote"
    merge: MergeFunction | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, Strategy):
            raise ConfigurationError(f"strategy must be a Strategy, not {self.strategy!r}")
        if self.strategy is Strategy.CUSTOM and not callable(self.merge):
            raise ConfigurationError("Strategy.CUSTOM needs merge=a function (base, local, remote)")
        if self.tie not in ("local", "remote") and not callable(self.tie):
            raise ConfigurationError(f"tie must be 'local', 'remote' or a function: {self.tie!r}")


Kind = Literal["merged", "won", "lost", "held"]


@dataclass(frozen=True, slots=True)
class Resolution:
    kind: Kind
    value: Any = None  # what to send (merged / won); the server's value when lost


def resolution_for(policy: ConflictPolicy, base: Any, local: Any, remote: Any) -> Resolution:
    """What to do about one version conflict (pure). ``local`` may be `DELETED`; ``remote``
    None means the server's state is unknown (only the user can resolution_for then)."""
    if policy.strategy is Strategy.USER or policy.strategy in SERVER_SIDE or remote is None:
        return Resolution("held")
    if local is DELETED:
        # A delete against a concurrent edit: the tie-break of the type decides.
        keep_local = policy.tie == "local"
        return Resolution("won", DELETED) if keep_local else Resolution("lost", remote)
    if policy.strategy is Strategy.CUSTOM:
        assert policy.merge is not None
        merged = policy.merge(base, local, remote)
    else:
        if not isinstance(local, Mapping) or not isinstance(remote, Mapping):
            return Resolution("held")  # not objects: no fields to merge
        merged = field_merge(base, local, remote, policy.tie)
    if merged == remote:
        return Resolution("lost", remote)
    if merged == local:
        return Resolution("won", local)
    return Resolution("merged", merged)


def entity_type(entity: str) -> str:
    return entity.partition(":")[0]


def _current(body: Any) -> tuple[Any, str | None] | None:
    """(data, version) of the server's entity in a reply body, if it holds one."""
    if not isinstance(body, Mapping):
        return None
    current = body.get("current", body)
    if not isinstance(current, Mapping) or "data" not in current:
        return None
    version = current.get("version")
    return current["data"], None if version is None else str(version)


class ConflictResolver:
    """Resolve version conflicts of a queue's operations by the policy of their type, and
    keep the base snapshots merges need. Give it to `SyncEngine(resolver=...)`."""

    def __init__(
        self,
        queue: SyncQueue,
        policies: Mapping[str, Strategy | ConflictPolicy] | None = None,
        *,
        default: Strategy | ConflictPolicy = Strategy.USER,
        on_resolved: Callable[[Operation, Resolution], Any] | None = None,
    ) -> None:
        self.queue = queue
        self.store = queue.conflicts
        self.policies = {name: _policy(p) for name, p in (policies or {}).items()}
        self.default = _policy(default)
        self.on_resolved = on_resolved

    def policy_for(self, entity: str) -> ConflictPolicy:
        return self.policies.get(entity_type(entity), self.default)

    @property
    def headers(self) -> Callable[[], dict[str, str]]:
        """For ``HttpTransport(headers=...)``: this device's clock, asked per request."""
        return lambda: {DEVICE_CLOCK: self.queue.stamp().encode()}

    # -- engine callbacks ----------------------------------------------------------------

    def on_delivered(self, op: Operation, outcome: ReplyOutcome) -> None:
        found = _current(outcome.body)
        if found is None:
            return
        data, version = found
        version = outcome.etag or version
        self.store.remember(op.entity, version, data)
        if isinstance(outcome.body, Mapping) and outcome.body.get("outcome") == "lost":
            # Last write wins, and this one did not: acknowledged, not applied. Recorded.
            self.store.record(
                op,
                "lost",
                strategy=self.policy_for(op.entity).strategy.value,
                local=op.payload,
                remote=data,
                remote_version=version,
                result=data,
                detail="the server kept a write with a greater clock",
            )
            self._tell(op, Resolution("lost", data))

    def on_conflict(self, op: Operation, outcome: ReplyOutcome) -> None:
        policy = self.policy_for(op.entity)
        found = _current(outcome.body)
        remote, version = found if found is not None else (None, None)
        failure: Exception | None = None
        with self.queue.batch():
            base, local = self.store.base_and_local(op.entity)
            try:
                decision = resolution_for(policy, base, local, remote)
            except Exception as exc:
                # The merge (application code: a custom function, a tie-break) failed on
                # this data. Hold the conflict for the user with the error: without a
                # "held" row the operation sat in CONFLICT where no one could see or
                # settle it, blocking its entity for good.
                failure, decision = exc, Resolution("held")
            common = {
                "strategy": policy.strategy.value,
                "base": base,
                "local": local,
                "remote": remote,
                "remote_version": version,
            }
            if decision.kind == "held":
                detail = outcome.reason
                if failure is not None:
                    detail += (
                        f"; the {policy.strategy.value} merge raised "
                        f"{type(failure).__name__}: {failure}"
                    )
                self.store.hold(op, **common, detail=detail)
            else:
                new = self.store.settle(
                    op,
                    result=decision.value,
                    remote=remote,
                    remote_version=version,
                    write=decision.kind != "lost",
                )
                self.store.record(
                    op,
                    decision.kind,
                    **common,
                    result=decision.value,
                    new_op_id=None if new is None else new.id,
                )
        self._tell(op, decision)
        if failure is not None:
            # After the commit: the conflict is held either way. Raised so the engine
            # reports it (last_error, on_error) like any failure it survives.
            raise failure

    def sweep(self) -> int:
        """Take over the conflict-held operations no user waits on: those held for want of
        a resolver (strategy ``none``: an engine without one, a file from an older pigeon,
        a crash before the record). Each is released, due again with its key (the server
        never applied it): the engine sends it, the server answers the conflict again (a
        replay of its answer, with its state), and `on_conflict` decides by the type's
        policy, against the server's state rather than a record that may have gone stale.
        Records held by a USER policy, or by a merge that raised, wait for the user and
        are left alone. Returns how many it released; one transaction."""
        released = 0
        with self.queue.batch():
            self.store.reconcile()
            for record in self.store.records("held", limit=1_000_000):
                if record.strategy != NO_RESOLVER:
                    continue
                if self.queue.get(record.op_id).status is OpStatus.CONFLICT:
                    self.queue.resolve_conflict(record.op_id)
                    released += 1
                self.store.close(record.id, "resolver")
        return released

    def _tell(self, op: Operation, decision: Resolution) -> None:
        if self.on_resolved is None:
            return
        try:
            self.on_resolved(op, decision)
        except Exception as exc:
            failure(log, "on_resolved raised; the resolution stands", exc=exc)


class ConflictHolder:
    """What a `SyncEngine` without a resolver does with a version conflict: hold it for the
    user, recorded like a USER policy's (strategy ``none``) with this device's state and
    whatever the server's reply said of its own, so ``pigeon conflicts list`` shows it and
    ``pigeon conflicts resolve ID --keep local|remote|both`` settles it. An engine given a
    `ConflictResolver` later hands these to it (`ConflictResolver.sweep`)."""

    def __init__(self, queue: SyncQueue) -> None:
        self.queue = queue
        self.store = queue.conflicts

    def on_conflict(self, op: Operation, outcome: ReplyOutcome) -> None:
        found = _current(outcome.body)
        remote, version = found if found is not None else (None, None)
        with self.queue.batch():
            base, local = self.store.base_and_local(op.entity)
            self.store.hold(
                op,
                strategy=NO_RESOLVER,
                detail=f"{outcome.reason}; held for you: the engine has no resolver",
                base=base,
                local=local,
                remote=remote,
                remote_version=version,
            )

    def sweep(self) -> int:
        """Record the conflict-held operations no callback recorded (a crash between the
        hold and its record, a file from an older pigeon): `ConflictStore.reconcile`."""
        return self.store.reconcile()


class Sweep:
    """A `SyncEngine`'s look for conflict-held operations no callback settled or recorded
    (held before the engine had a resolver, a crash in between): handed to its resolver,
    or recorded for the user (`ConflictResolver.sweep`, `ConflictHolder.sweep`). ``due``
    on the engine's first flush or loop step (so on start), then after cycles that held
    conflicts; not before every flush, as it reads every conflict-held operation."""

    def __init__(self, conflicts: ConflictResolver | ConflictHolder) -> None:
        self.conflicts = conflicts
        self.due = True
        self._lock = threading.Lock()

    @classmethod
    def of(cls, queue: SyncQueue, resolver: ConflictResolver | None) -> Sweep:
        """The resolver's, or a `ConflictHolder`'s (the engine has no resolver)."""
        return cls(resolver if resolver is not None else ConflictHolder(queue))

    def __call__(self, turns: threading.Semaphore, count: int) -> bool:
        """Sweep if due, holding all ``count`` of the engine's turns, so that no cycle is
        between holding an operation and telling ``on_conflict``. True when operations
        were released (due to send again). What the sweep raised is raised, due again."""
        with self._lock:
            due, self.due = self.due, False
            if not due:
                return False
            for _ in range(count):
                turns.acquire()
            try:
                return self.conflicts.sweep() > 0
            except BaseException:
                self.due = True
                raise
            finally:
                for _ in range(count):
                    turns.release()


def _policy(value: Strategy | ConflictPolicy) -> ConflictPolicy:
    if isinstance(value, ConflictPolicy):
        return value
    if isinstance(value, Strategy):
        return ConflictPolicy(value)
    raise ConfigurationError(f"a policy is a Strategy or a ConflictPolicy, not {value!r}")
