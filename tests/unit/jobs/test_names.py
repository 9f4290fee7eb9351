"""One name, one meaning within jobs: the renamed names, and
``FailedJob`` where it breaks the import circle between ``jobs/app.py`` and
``jobs/manager.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pigeon
import pigeon.jobs
from pigeon.jobs import job, manager, stats


def test_attempt_outcome_and_job_queue_stats_are_the_names_now() -> None:
    assert pigeon.jobs.AttemptOutcome is manager.AttemptOutcome
    assert pigeon.jobs.JobQueueStats is stats.JobQueueStats
    assert "Outcome" not in pigeon.jobs.__all__ and "QueueStats" not in pigeon.jobs.__all__
    assert pigeon.jobs.JobQueueStats is not pigeon.QueueStats  # the edge queue's


def test_failed_job_lives_beside_job_and_app_does_not_import_the_manager() -> None:
    assert pigeon.jobs.FailedJob is job.FailedJob is manager.FailedJob
    tree = ast.parse(Path(pigeon.jobs.app.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "pigeon.jobs.manager" not in imported
