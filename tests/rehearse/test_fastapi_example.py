"""``pigeon rehearse`` against an app unlike the reference one: the FastAPI example
(examples/fastapi_orders), served by ``pigeon serve --app``, its ORM writes and deferred
jobs in the request's own SQLAlchemy session. Its charge task writes in its job's own
database, the worker's: no ``DATABASE_URL`` is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rehearse.cli import failures, rehearse, scenario

pytestmark = pytest.mark.slow
EXAMPLE = "examples.fastapi_orders"
PASSING = (
    "crash-before-commit",
    "crash-after-commit",
    "duplicate-concurrent",
    "deploy-mid-job",
    "bad-payload",  # a fraction of a second: NaN, a bool for an integer, refused
)


def test_the_fastapi_example_passes_crashes_copies_a_deploy_and_bad_bodies(tmp_path: Path) -> None:
    db = tmp_path / "orders.db"
    args = [a for name in PASSING for a in ("--scenario", name)]
    done, report = rehearse(
        tmp_path, "--db", str(db), "--app", f"{EXAMPLE}.app:serve",
        "--jobs", f"{EXAMPLE}.jobs:app", "--hooks", f"{EXAMPLE}.rehearsal:hooks",
        *args,
    )  # fmt: skip
    assert done.returncode == 0, failures(report) or done.stderr
    assert report is not None and report["counts"]["passed"] == len(PASSING)
    for name in PASSING[:3]:
        rec = scenario(report, name)["reconciliation"]
        assert rec["found"] == rec["expected"] and rec["expected"]["orders"] > 0, name
        assert rec["failed_with_owner"] == 0 and rec["found"]["jobs"] == 2 * rec["found"]["orders"]
