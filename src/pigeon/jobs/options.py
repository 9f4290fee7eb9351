"""``WorkerOptions``: how a worker process claims, polls, recycles and maintains, in one
frozen value that checks itself when it is made (in the spirit of httpx's ``Timeout``).

The same value is taken by the library (``Worker(app, db, queues, options)``), by the
supervisor (which hands it to each worker process it spawns) and by ``pigeon worker``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.autoscale import DEFAULT_KEEPALIVE
from pigeon.jobs.job import finite, positive_int
from pigeon.logs import LogFormat
from pigeon.storage.sqlite import Durability


@dataclass(frozen=True)
class WorkerOptions:
    """Every field has the default a worker always had.

    - ``prefetch``: jobs claimed per free thread (default 1: only what can start now);
      ``batch``: at most this many per round trip (None: each queue's own ``batch``).
      A claim never takes more than the queue's free threads x ``prefetch``;
    - ``poll`` / ``poll_max``: seconds between claims of an idle queue, backing off from
      ``poll`` to ``poll_max`` (``poll <= poll_max``); a NOTIFY wakes it sooner;
    - ``recycle_jobs`` / ``recycle_mib``: replace the process after exactly N started jobs
      (whatever was claimed: the rest are released) / over M MiB;
    - ``schedules``: run the app's periodic schedules; ``maintenance``: check freshness
      objectives and purge finished jobs (every ``purge_every`` seconds);
    - ``keepalive``: seconds without backlog before an idle thread retires;
      ``control_every``: seconds between looks at each queue's backlog;
    - ``durability``, ``log_format``, ``log_redact``, ``keys_file``: for the processes the
      supervisor spawns (the database they open, how they log, the keys that open sealed
      columns: a file, else PIGEON_KEYS / PIGEON_KEYS_FILE, if any).
    """

    batch: int | None = None
    prefetch: int = 1
    poll: float = 0.05
    poll_max: float = 0.5
    recycle_jobs: int | None = None
    recycle_mib: float | None = None
    schedules: bool = True
    maintenance: bool = True
    keepalive: float = DEFAULT_KEEPALIVE
    control_every: float = 0.2
    purge_every: float = 60.0
    durability: Durability = "full"
    log_format: LogFormat = "text"
    log_redact: tuple[str, ...] = ()
    keys_file: str | None = None

    def __post_init__(self) -> None:
        if not positive_int(self.prefetch):
            raise ConfigurationError(f"prefetch must be an int >= 1, got {self.prefetch!r}")
        for name in ("batch", "recycle_jobs"):
            value = getattr(self, name)
            if value is not None and not positive_int(value):
                raise ConfigurationError(f"{name} must be an int >= 1 or None, got {value!r}")
        if self.recycle_mib is not None and not (finite(self.recycle_mib) and self.recycle_mib > 0):
            raise ConfigurationError(f"recycle_mib must be > 0 MiB, got {self.recycle_mib!r}")
        for name in ("poll", "poll_max", "control_every", "purge_every"):
            value = getattr(self, name)
            if not (finite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a number of seconds > 0, got {value!r}")
        if not (finite(self.keepalive) and self.keepalive >= 0):
            raise ConfigurationError(f"keepalive must be >= 0 seconds, got {self.keepalive!r}")
        if self.poll > self.poll_max:
            raise ConfigurationError(
                f"poll ({self.poll:g}s) must not exceed poll_max ({self.poll_max:g}s)"
            )
        for name in ("schedules", "maintenance"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be True or False")
        if self.durability not in get_args(Durability):
            raise ConfigurationError(
                f"durability must be one of {get_args(Durability)}, got {self.durability!r}"
            )
        if self.log_format not in get_args(LogFormat):
            raise ConfigurationError(
                f"log_format must be one of {get_args(LogFormat)}, got {self.log_format!r}"
            )
        if not isinstance(self.log_redact, tuple) or not all(
            isinstance(n, str) for n in self.log_redact
        ):
            raise ConfigurationError("log_redact must be a tuple of names")
        if self.keys_file is not None and not (isinstance(self.keys_file, str) and self.keys_file):
            raise ConfigurationError(f"keys_file must be a path or None, got {self.keys_file!r}")
