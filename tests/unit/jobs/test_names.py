"""One name, one meaning within jobs: the renamed names, their deprecated aliases, and
``FailedJob`` where it breaks the import circle between ``jobs/app.py`` and
``jobs/manager.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pigeon
import pigeon.jobs
from pigeon.jobs import job, manager, stats
from pigeon.jobs.stores.memory import MemoryJobStore


def test_attempt_outcome_and_job_queue_stats_are_the_names_now() -> None:
    assert pigeon.jobs.AttemptOutcome is manager.AttemptOutcome
    assert pigeon.jobs.JobQueueStats is stats.JobQueueStats
    assert "Outcome" not in pigeon.jobs.__all__ and "QueueStats" not in pigeon.jobs.__all__
    assert pigeon.jobs.JobQueueStats is not pigeon.QueueStats  # the edge queue's


@pytest.mark.parametrize(
    ("old", "new"), [("Outcome", "AttemptOutcome"), ("QueueStats", "JobQueueStats")]
)
def test_the_old_public_names_still_resolve_with_a_deprecation_warning(old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=new):
        assert getattr(pigeon.jobs, old) is getattr(pigeon.jobs, new)


def test_manager_outcome_and_claim_are_deprecated_aliases() -> None:
    with pytest.warns(DeprecationWarning, match="AttemptOutcome"):
        assert manager.Outcome is manager.AttemptOutcome
    store = MemoryJobStore()
    m = manager.JobManager(store)
    m.enqueue(job.JobSpec("q", "t"))
    with pytest.warns(DeprecationWarning, match="lease_jobs"):
        (leased,) = m.claim("q", "w", 1, lease=5)
    assert leased.attempt == 1
    assert stats.QueueStats is stats.JobQueueStats  # the ops page's import keeps working


def test_failed_job_lives_beside_job_and_app_does_not_import_the_manager() -> None:
    assert pigeon.jobs.FailedJob is job.FailedJob is manager.FailedJob
    tree = ast.parse(Path(pigeon.jobs.app.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "pigeon.jobs.manager" not in imported
