"""``pigeon rehearse`` against the Django example (examples/django_notes), served by
``pigeon serve --app notes_project.served:serve`` (`pigeon.integrations.django.served`),
its ORM writes, ledger rows and deferred jobs in the view's own transaction, its jobs run
by ``pigeon worker`` with Django set up (`pigeon.integrations.django.worker`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integrations.django_notes import EXAMPLE_PATH
from tests.rehearse.cli import failures, rehearse, scenario

pytestmark = pytest.mark.slow
PASSING = (
    "crash-before-commit",
    "crash-after-commit",
    "duplicate-concurrent",
    "deploy-mid-job",  # the same jobs app again: no payload changed
    "bad-payload",
)


def test_the_django_example_passes_crashes_copies_a_deploy_and_bad_bodies(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    env = {
        "PYTHONPATH": EXAMPLE_PATH,
        "DJANGO_SETTINGS_MODULE": "notes_project.settings",
        "NOTES_DB": str(db),  # the workers' Django settings: the rehearsal's database
        "PIGEON_DJANGO_JOBS_APP": "notes.jobs:app",
    }
    args = [a for name in PASSING for a in ("--scenario", name)]
    done, report = rehearse(
        tmp_path, "--db", str(db), "--app", "notes_project.served:serve",
        "--jobs", "pigeon.integrations.django.worker:app",
        "--hooks", "notes_project.rehearsal:hooks", *args, env=env,
    )  # fmt: skip
    assert done.returncode == 0, failures(report) or done.stderr
    assert report is not None and report["counts"]["passed"] == len(PASSING)
    for name in PASSING[:3]:
        rec = scenario(report, name)["reconciliation"]
        assert rec["found"] == rec["expected"] and rec["expected"]["notes_note"] > 0, name
        found = rec["found"]  # a ledger row and an indexing job for every note, no more
        assert found["notes_effect"] == found["jobs"] == found["notes_note"], name
    bad = scenario(report, "bad-payload")["reconciliation"]
    assert bad["found"]["notes_note"] == 0 and bad["counts"]["refused by the schema"] > 0
