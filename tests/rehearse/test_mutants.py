"""Each scenario against a deliberately broken variant of the reference app
(tests/rehearse/mutants/): the scenario fails, and its report names the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rehearse.cli import rehearse, scenario

pytestmark = pytest.mark.slow


def _failed(tmp_path: Path, name: str, *args: str) -> list[str]:
    done, report = rehearse(tmp_path, "--scenario", name, *args)
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
        "10",
    )
    assert any("slower at the peak" in p for p in problems), problems


def test_deploy_mid_job_finds_old_payloads_the_new_code_cannot_run(tmp_path: Path) -> None:
    problems = _failed(
        tmp_path, "deploy-mid-job", "--next-jobs", "tests.rehearse.apps.graded_v2:broken"
    )
    assert any("fewer jobs succeeded than for the twins" in p for p in problems), problems
    assert any(p.startswith("effects:") and "lost" in p for p in problems), problems
