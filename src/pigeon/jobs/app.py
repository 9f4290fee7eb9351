"""The App: where tasks, queues, schedules, owners and the alert hook are declared.

    app = App()
    app.queue("grading", min_workers=2, max_workers=12, freshness=60, owner="grading-team")

    @app.task(queue="grading", fields=("answer_id",), access=answer_author_active)
    def grade(answer_id: int) -> None: ...

Workers import the app by ``"module:attr"`` and open the database they are given.

Job payloads are minimal and scoped: a task may declare the ``fields`` its payload may carry
(ids, not the data they name: the task re-reads that when it runs, so the queue holds no
copy of an answer or an e-mail address), and any other field is refused at enqueue, naming
it. A task may declare an ``access`` re-check, run in a read transaction before the work;
a refusal fails the job for good (``AccessRevoked``, to the failed store with its owner).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pigeon.core.imports import import_ref
from pigeon.exceptions import (
    AccessRevoked,
    ConfigurationError,
    InvalidOperation,
    NotFound,
    PayloadInvalid,
    PermanentError,
    UpcastFailed,
)
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.job import DEFAULT_MAX_ATTEMPTS, finite, positive_int
from pigeon.jobs.stores import store_for
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.versions import PayloadVersions, Upcaster

if TYPE_CHECKING:
    from pigeon.jobs.job import FailedJob, Job
    from pigeon.jobs.store import CallbackSession, JobStore
    from pigeon.storage.base import Database, Tx

AlertHook = Callable[["FailedJob"], None]
# (queue, oldest eligible-ready age in seconds, the queue's freshness objective in seconds)
FreshnessHook = Callable[[str, float, float], None]
# A task's access re-check: (read transaction, the job about to run) -> why access is
# refused, or None to let the work run. It reads ids from job.payload / job.record_id.
AccessCheck = Callable[["Tx", "Job"], "str | None"]
DEFAULT_RETENTION = 7 * 24 * 3600.0  # finished jobs are purged after a week
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class QueueConfig:
    """A named queue: its worker budget, freshness objective (seconds) and failure owner."""

    name: str
    min_workers: int = 1
    max_workers: int = 4
    freshness: float = 60.0
    owner: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    backoff: Backoff = field(default_factory=Backoff)
    batch: int = 8

    def __post_init__(self) -> None:
        if not 0 <= self.min_workers <= self.max_workers or self.max_workers < 1:
            raise ConfigurationError(
                f"queue {self.name!r}: worker budget needs 0 <= min <= max and max >= 1, "
                f"got min={self.min_workers} max={self.max_workers}"
            )
        if not self.freshness > 0:
            raise ConfigurationError(
                f"queue {self.name!r}: freshness objective must be > 0 s, got {self.freshness}"
            )
        if self.batch < 1:
            raise ConfigurationError(f"queue {self.name!r}: batch must be >= 1, got {self.batch}")

    def check_workers(self, workers: int) -> int:
        if not self.min_workers <= workers <= self.max_workers:
            raise ConfigurationError(
                f"queue {self.name!r}: {workers} workers is outside its budget "
                f"{self.min_workers}..{self.max_workers}"
            )
        return workers

    def budget(self, spec: int | Budget) -> Budget:
        """The run-time budget for ``spec``: a bare number is a maximum (the queue's own
        minimum, capped by it, is the floor); ``Budget(min, max)`` must fit in the queue's."""
        if isinstance(spec, int):
            self.check_workers(spec)
            return Budget(min(self.min_workers, spec), spec)
        if spec.max > self.max_workers:
            raise ConfigurationError(
                f"queue {self.name!r}: {spec} workers is outside its budget "
                f"{self.min_workers}..{self.max_workers}"
            )
        return spec


@dataclass(frozen=True)
class Task:
    name: str
    queue: str
    func: Callable[..., Any]
    context: bool
    owner: str | None
    max_attempts: int
    max_age: float | None
    permanent: tuple[type[BaseException], ...]
    fields: frozenset[str] | None = None  # None: any field that binds
    access: AccessCheck | None = None
    versions: PayloadVersions | None = None  # None: version 1, nothing to upcast

    @property
    def version(self) -> int:
        """The version of the payload shape the task takes (``@app.task(version=...)``)."""
        return 1 if self.versions is None else self.versions.version

    def current(self, payload: Mapping[str, Any], version: int) -> Mapping[str, Any]:
        """``payload`` of ``version`` as the task takes it now: upcast if older (its result
        checked against the task's fields and parameters). UpcastFailed if it cannot be."""
        if version == self.version:
            return payload
        if self.versions is None:
            raise UpcastFailed(
                f"task {self.name!r} is version 1 and has no upcaster from version {version}"
            )
        upcast = self.versions.upcast(payload, version)
        problem = self.undeclared(upcast) or self.binding_error(upcast)
        if problem is not None:
            raise UpcastFailed(
                f"upcast from version {version} to {self.version} does not fit: {problem}"
            )
        return upcast

    def undeclared(self, payload: Mapping[str, Any]) -> str | None:
        """Why ``payload`` carries more than the task declares (None: it does not)."""
        if self.fields is None:
            return None
        extra = sorted(k for k in payload if k not in self.fields)
        if not extra:
            return None
        return (
            f"task {self.name!r} does not declare payload field "
            f"{', '.join(map(repr, extra))} (its fields: {', '.join(sorted(self.fields))})"
        )

    def before_run(self, db: Database | JobStore[CallbackSession], job: Job) -> None:
        """What the worker checks before the work: an older payload is upcast to the task's
        version (``job.payload`` and ``job.version`` then hold the result), the payload
        carries only declared fields (a job written by a producer without the app), and
        the access re-check lets it run. Raises PayloadInvalid (UpcastFailed) /
        AccessRevoked, never retried."""
        if job.version != self.version:
            job.payload = dict(self.current(job.payload, job.version))
            job.version = self.version
        problem = self.undeclared(job.payload)
        if problem is not None:
            raise PayloadInvalid(problem)
        if self.access is None:
            return
        with store_for(db).reading() as session:
            reason = self.access(session.tx, job)
        if reason is not None:
            raise AccessRevoked(f"access re-check of task {self.name!r} refused: {reason}")

    def binding_error(self, payload: object) -> str | None:
        """Why ``payload`` cannot be the task's arguments (None: it binds). The worker
        calls ``func(ctx, **payload)`` or ``func(**payload)``; a mismatch can never succeed,
        so it is refused at enqueue and a permanent failure at run time."""
        if not isinstance(payload, Mapping) or not all(isinstance(k, str) for k in payload):
            return f"payload must be an object with str keys, got {type(payload).__name__}"
        try:
            signature = inspect.signature(self.func)
        except (TypeError, ValueError):  # a builtin without a signature: nothing to check
            return None
        try:
            signature.bind(*([None] if self.context else []), **payload)
        except TypeError as exc:
            return f"payload {sorted(payload)} does not fit task {self.name!r}: {exc}"
        return None


@dataclass(frozen=True)
class Schedule:
    """Run ``task`` every ``every`` seconds; tick n covers [n*every, (n+1)*every)."""

    name: str
    every: float
    task: str
    payload: Mapping[str, Any]


class App:
    def __init__(
        self,
        db: Database | None = None,
        *,
        alert: AlertHook | None = None,
        permanent: tuple[type[BaseException], ...] = (PermanentError,),
        default_owner: str = "operations",
        on_freshness_breach: FreshnessHook | None = None,
        retention: float | None = DEFAULT_RETENTION,
    ) -> None:
        if retention is not None and not retention > 0:
            raise ConfigurationError(f"retention must be > 0 seconds or None, got {retention}")
        self.db = db
        self.alert = alert
        # Called once per breach episode (see pigeon.jobs.stats.FreshnessMonitor).
        self.on_freshness_breach = on_freshness_breach
        # Succeeded and cancelled jobs older than this are purged by the workers'
        # maintenance; None keeps them forever. Failed jobs are never purged. A purged
        # job's unique_key is free again: this is also the window of enqueue dedup.
        self.retention = retention
        self.permanent = permanent
        self.default_owner = default_owner
        self.tasks: dict[str, Task] = {}
        self.queues: dict[str, QueueConfig] = {}
        self.schedules: dict[str, Schedule] = {}

    def queue(self, name: str, **options: Any) -> QueueConfig:
        config = QueueConfig(name, **options)
        self.queues[name] = config
        return config

    def queue_config(self, name: str) -> QueueConfig:
        return self.queues.get(name) or self.queue(name)

    @overload
    def task(
        self,
        func: F,
        *,
        queue: str = "default",
        name: str | None = None,
        context: bool = False,
        owner: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_age: float | None = None,
        permanent: tuple[type[BaseException], ...] = (),
        fields: Sequence[str] | None = None,
        access: AccessCheck | None = None,
        version: int = 1,
        upcast: Mapping[int, Upcaster] | None = None,
    ) -> F: ...

    @overload
    def task(
        self,
        func: None = None,
        *,
        queue: str = "default",
        name: str | None = None,
        context: bool = False,
        owner: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_age: float | None = None,
        permanent: tuple[type[BaseException], ...] = (),
        fields: Sequence[str] | None = None,
        access: AccessCheck | None = None,
        version: int = 1,
        upcast: Mapping[int, Upcaster] | None = None,
    ) -> Callable[[F], F]: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        *,
        queue: str = "default",
        name: str | None = None,
        context: bool = False,
        owner: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_age: float | None = None,
        permanent: tuple[type[BaseException], ...] = (),
        fields: Sequence[str] | None = None,
        access: AccessCheck | None = None,
        version: int = 1,
        upcast: Mapping[int, Upcaster] | None = None,
    ) -> Any:
        """Register a task. ``context=True`` passes a JobContext as first argument.

        ``fields``: the payload fields the task may carry, each a parameter of the function
        (every parameter without a default among them); anything else is refused at
        enqueue, naming the field. ``access(tx, job)``: the re-check run before the work,
        returning why access is refused or None (see ``pigeon.jobs.access``).
        ``version``: the version of the payload's shape (1 by default), which every job
        of the task carries; ``upcast={n: fn}``: ``fn`` turns a version-``n`` payload
        into a version-``n + 1`` one, a chain without gaps up to ``version``
        (``pigeon.jobs.versions``)."""

        if not positive_int(max_attempts):
            raise ConfigurationError(
                f"task max_attempts must be an integer >= 1, got {max_attempts!r}"
            )
        if max_age is not None and (not finite(max_age) or max_age <= 0):
            raise ConfigurationError(f"task max_age must be finite seconds > 0, got {max_age!r}")

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            task_name = name or f.__name__
            if task_name in self.tasks:
                raise ConfigurationError(f"task {task_name!r} is registered twice")
            declared = _declared_fields(task_name, f, context, fields)
            if access is not None and not callable(access):
                raise ConfigurationError(f"task {task_name!r}: access must be callable")
            versions = PayloadVersions.declare(task_name, version, upcast)
            self.queue_config(queue)
            self.tasks[task_name] = Task(
                task_name,
                queue,
                f,
                context,
                owner,
                max_attempts,
                max_age,
                permanent,
                declared,
                access,
                versions if versions.version > 1 else None,
            )
            return f

        return register(func) if func is not None else register

    def periodic(
        self, *, every: float, task: str, name: str | None = None, **payload: Any
    ) -> Schedule:
        if not every > 0:
            raise ConfigurationError(f"schedule period must be > 0 s, got {every}")
        schedule = Schedule(name or task, every, task, payload)
        self.schedules[schedule.name] = schedule
        return schedule

    def get_task(self, name: str) -> Task:
        try:
            return self.tasks[name]
        except KeyError:
            raise NotFound(f"no task named {name!r} in this app") from None

    def check_spec(
        self, queue: str, task: str, payload: object, version: int | None = None
    ) -> None:
        """Refuse (InvalidOperation) a job this app could never run: an unknown task, a
        queue other than the task's own (no worker of that queue would find it), a payload
        with a field the task does not declare (PayloadInvalid), or one that does not bind
        to the task function's parameters. ``version``: the payload's, when not the task's
        own: an older one must upcast to a payload that fits (UpcastFailed), a newer one
        is refused (this app cannot check it)."""
        registered = self.tasks.get(task)
        if registered is None:
            raise InvalidOperation(f"no task named {task!r} in this app")
        if queue != registered.queue:
            raise InvalidOperation(
                f"task {task!r} runs on queue {registered.queue!r}, not {queue!r}"
            )
        if version is not None and version > registered.version:
            raise InvalidOperation(
                f"task {task!r} is version {registered.version} in this app: a payload of "
                f"version {version} cannot be checked here"
            )
        older = version is not None and version != registered.version
        if older and version is not None and isinstance(payload, Mapping):
            registered.current(payload, version)  # upcast, then checked
            return
        if isinstance(payload, Mapping):  # first: it names the field it refuses
            problem = registered.undeclared(payload)
            if problem is not None:
                raise PayloadInvalid(problem)
        problem = registered.binding_error(payload)
        if problem is not None:
            raise InvalidOperation(problem)

    def owner_for(self, queue: str, task: str) -> str:
        t = self.tasks.get(task)
        if t is not None and t.owner:
            return t.owner
        q = self.queues.get(queue)
        if q is not None and q.owner:
            return q.owner
        return self.default_owner

    def is_permanent(self, task: str, error: BaseException) -> bool:
        t = self.tasks.get(task)
        # Whatever the app lists: retrying gives neither the access back nor the payload
        # another shape.
        kinds: tuple[type[BaseException], ...] = (AccessRevoked, PayloadInvalid, *self.permanent)
        kinds += t.permanent if t else ()
        return isinstance(error, kinds)


def _declared_fields(
    task: str, func: Callable[..., Any], context: bool, fields: Sequence[str] | None
) -> frozenset[str] | None:
    """``fields`` checked against the function: each one a parameter it takes, and every
    parameter it needs among them (else no payload could ever run it)."""
    if fields is None:
        return None
    if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
        raise ConfigurationError(
            f"task {task!r}: fields must be a sequence of names such as ('record_id',), "
            f"got {fields!r}"
        )
    declared = frozenset(fields)
    try:
        params = list(inspect.signature(func).parameters.values())[1 if context else 0 :]
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return declared
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return declared
    named = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(declared - set(named))
    if unknown:
        raise ConfigurationError(
            f"task {task!r} declares field {unknown[0]!r}, not a parameter of {func.__name__}"
        )
    needed = sorted(n for n, p in named.items() if p.default is p.empty and n not in declared)
    if needed:
        raise ConfigurationError(
            f"task {task!r}: parameter {needed[0]!r} has no default and is not a declared "
            "field, so no payload could run it"
        )
    return declared


# The database the worker loading an app claims its jobs in, named in the environment
# while the app is imported (``load_app(..., db=)``): a loader that sets up an application
# of its own checks that it is one of that application's (`pigeon.integrations.django.worker`).
WORKER_DB_ENV = "PIGEON_WORKER_DB"


def load_app(path: str, *, db: str | None = None) -> App:
    """Import ``"package.module:attr"`` and return the App it names; a ConfigurationError
    naming the app for anything wrong with the reference (`pigeon.core.imports.import_ref`)
    or an attribute that is not an App. ``db``: the database of the worker loading it
    (``WORKER_DB_ENV`` while it imports)."""
    with _naming(WORKER_DB_ENV, db):
        app = import_ref(path, "app")
    if not isinstance(app, App):
        raise ConfigurationError(f"{path!r} is not a pigeon.jobs.App (got {type(app).__name__})")
    return app


@contextlib.contextmanager
def _naming(name: str, value: str | None) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` (if any) for the block."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
