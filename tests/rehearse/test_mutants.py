"""Each scenario against a deliberately broken variant of the reference app
(tests/rehearse/mutants/): the scenario fails, and its report names the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_broker
from tests.rehearse.cli import rehearse, scenario
from tests.rehearse.mutants.servers import MUTANT_DB

pytestmark = pytest.mark.slow


SERVERS = "tests.rehearse.mutants.servers"


def _failed(tmp_path: Path, name: str, *args: str) -> list[str]:
    env = {MUTANT_DB: str(tmp_path / "own.db")}
    done, report = rehearse(tmp_path, "--scenario", name, *args, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert report is not None and report["ok"] is False
    result = scenario(report, name)
    assert result["outcome"] == "failed"
    problems: list[str] = result["problems"]
    return problems


def test_revoked_access_finds_a_re_check_that_never_refuses(tmp_path: Path) -> None:
    problems = _failed(
        tmp_path, "revoked-access", "--jobs", "tests.rehearse.mutants.unchecked_access:app"
    )
    assert any("ran" in p and "jobs of revoked principals" in p for p in problems), problems


def test_peak_finds_a_task_serialised_under_load(tmp_path: Path) -> None:
    problems = _failed(
        tmp_path,
        "peak",
        "--jobs",
        "tests.rehearse.mutants.contended:app",
        "--rate",
        "1",
        "--peak",
        "8",
    )  # 40 grading jobs of 0.25 s in turn: 10 s to drain where the planner allows 5 s
    assert any("slower at the peak" in p for p in problems), problems


def test_deploy_mid_job_finds_old_payloads_the_new_code_cannot_run(tmp_path: Path) -> None:
    problems = _failed(
        tmp_path, "deploy-mid-job", "--next-jobs", "tests.rehearse.apps.graded_v2:broken"
    )
    assert any("fewer jobs succeeded than for the twins" in p for p in problems), problems
    assert any(p.startswith("effects:") and "lost" in p for p in problems), problems


def test_crash_before_commit_finds_an_effect_written_outside_the_transaction(
    tmp_path: Path,
) -> None:
    problems = _failed(
        tmp_path, "crash-before-commit",
        "--app", f"{SERVERS}:outside_tx", "--hooks", f"{SERVERS}:own_db_hooks",
    )  # fmt: skip
    assert any(p.startswith("answers_seen (own database):") and "duplicates" in p for p in problems)


def test_crash_after_commit_finds_a_job_enqueued_after_the_commit(tmp_path: Path) -> None:
    problems = _failed(tmp_path, "crash-after-commit", "--app", f"{SERVERS}:enqueue_after_commit")
    assert any(p.startswith("jobs:") and "lost" in p for p in problems), problems


def test_duplicate_concurrent_finds_a_write_route_outside_the_intake(tmp_path: Path) -> None:
    problems = _failed(
        tmp_path, "duplicate-concurrent",
        "--app", f"{SERVERS}:bypass_intake", "--hooks", f"{SERVERS}:bypass_hooks",
    )  # fmt: skip
    assert any(p.startswith("records:") and "duplicates" in p for p in problems), problems
    assert any("executed more than once" in p for p in problems), problems


def test_bad_payload_finds_a_handler_that_trusts_a_loose_schema(tmp_path: Path) -> None:
    problems = _failed(tmp_path, "bad-payload", "--app", f"{SERVERS}:loose_schema")
    assert any(p.startswith("failed on an odd body:") and p.endswith("500") for p in problems)


def test_relay_down_finds_a_request_that_publishes_itself(tmp_path: Path) -> None:
    broker = require_broker("redis")
    problems = _failed(
        tmp_path, "relay-down", "--app", f"{SERVERS}:publish_in_request", "--relay-to", broker
    )
    assert any("while the broker was down" in p for p in problems), problems


def test_the_unbroken_route_passes_what_its_variants_fail(tmp_path: Path) -> None:
    """The variants' baseline: the same route as the reference app writes it, served by
    ``--app``, passes the scenarios that fail them."""
    broker = require_broker("redis")
    scenarios = ["crash-before-commit", "crash-after-commit", "duplicate-concurrent"]
    scenarios += ["bad-payload", "relay-down"]
    args = [a for s in scenarios for a in ("--scenario", s)]
    done, report = rehearse(tmp_path, "--app", f"{SERVERS}:answers", "--relay-to", broker, *args)
    assert done.returncode == 0, done.stdout
    assert report is not None and report["counts"] == {"passed": 5, "failed": 0, "skipped": 0}
