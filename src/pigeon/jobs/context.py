"""What a task sees of its job when registered with ``context=True``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pigeon.jobs.effects import effect
from pigeon.jobs.job import Job
from pigeon.jobs.providers import Provider, call_provider
from pigeon.jobs.timeouts import Timeouts
from pigeon.storage.base import Database, Tx

T = TypeVar("T")


@dataclass(frozen=True)
class JobContext:
    job: Job
    db: Database
    timeouts: Timeouts

    @property
    def external_deadline(self) -> float:
        """Seconds an external call may take inside this job."""
        return self.timeouts.external_call_seconds

    def effect(self, key: str, mutation: Callable[[Tx], T], *, scope: str | None = None) -> T:
        """Claim + mutation + result once per key, scoped by default to this task."""
        return effect(self.db, scope or self.job.task, key, mutation)

    def call_provider(self, provider: Provider, reference: str, request: Any) -> Any:
        return call_provider(
            self.db,
            provider,
            reference,
            request,
            record_id=self.job.record_id,
            obligation=self.job.obligation,
        )
