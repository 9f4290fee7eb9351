"""Accountable background work: queues, leases, workers, failed store, effects, schedules.

from pigeon import jobs

app = jobs.App()

@app.task(queue="grading", context=True)
def grade(ctx: jobs.JobContext, answer_id: str) -> None:
    ctx.effect(f"answer:{answer_id}", lambda tx: ...)

# inside the intake handler's transaction:
jobs.records.accept(ctx.tx, kind="answer", data=answer,
                    obligations={"grading": jobs.JobSpec("grading", "grade", {...})})
"""

from __future__ import annotations

from pigeon.jobs import access, outbox, planner, records
from pigeon.jobs.app import App, QueueConfig, Schedule, load_app
from pigeon.jobs.autoscale import Budget
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.context import JobContext
from pigeon.jobs.effects import effect
from pigeon.jobs.failed import FailedStore
from pigeon.jobs.job import FailedJob, Job, JobSpec, JobStatus
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.providers import Provider, call_provider
from pigeon.jobs.relay import (
    CallablePublisher,
    Message,
    Publisher,
    RedisStreamPublisher,
    Relay,
    RelayRunner,
)
from pigeon.jobs.retention import purge_finished
from pigeon.jobs.schedule import Scheduler
from pigeon.jobs.stats import (
    FreshnessMonitor,
    JobQueueStats,
    RelayLag,
    queue_stats,
    relay_lag,
)
from pigeon.jobs.supervisor import Supervisor
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.worker import Worker

__all__ = [
    "App",
    "AttemptOutcome",
    "Backoff",
    "Budget",
    "CallablePublisher",
    "FailedJob",
    "FailedStore",
    "FreshnessMonitor",
    "Job",
    "JobContext",
    "JobManager",
    "JobQueueStats",
    "JobSpec",
    "JobStatus",
    "Message",
    "Provider",
    "Publisher",
    "QueueConfig",
    "RedisStreamPublisher",
    "Relay",
    "RelayLag",
    "RelayRunner",
    "Schedule",
    "Scheduler",
    "Supervisor",
    "Timeouts",
    "Worker",
    "WorkerOptions",
    "access",
    "call_provider",
    "effect",
    "enqueue",
    "load_app",
    "outbox",
    "planner",
    "purge_finished",
    "queue_stats",
    "records",
    "relay_lag",
]
