"""``provider-unknown`` against an app whose notifications go through a provider (a
stand-in mail service recording what it applied): a good adapter passes, one that mints a
new key for every call and cannot look up what it sent fails, naming the duplicates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rehearse.apps import mailing
from tests.rehearse.cli import rehearse, scenario

pytestmark = pytest.mark.slow
APP = "tests.rehearse.apps.mailing"


def _run(tmp_path: Path, hooks: str, forgetful: bool) -> dict[str, object]:
    db = tmp_path / "rehearsal.db"
    env = {mailing.DB_ENV: str(db), "FAKE_MAIL_FORGETFUL": "1" if forgetful else "0"}
    done, report = rehearse(
        tmp_path, "--db", str(db), "--jobs", f"{APP}:app", "--hooks", f"{APP}:{hooks}",
        "--scenario", "provider-unknown", env=env,
    )  # fmt: skip
    assert report is not None, done.stderr
    assert done.returncode == (1 if forgetful else 0), done.stdout
    return scenario(report, "provider-unknown")


def test_a_lost_answer_is_found_by_lookup_and_applied_once(tmp_path: Path) -> None:
    result = _run(tmp_path, "hooks", forgetful=False)
    assert result["outcome"] == "passed", result
    rec = result["reconciliation"]
    assert rec["counts"]["provider answers lost"] > 0  # type: ignore[index]
    assert rec["found"]["fake_mail"] == rec["expected"]["fake_mail"] > 0  # type: ignore[index]


def test_an_adapter_that_cannot_look_up_sends_twice_and_is_named(tmp_path: Path) -> None:
    result = _run(tmp_path, "forgetful_hooks", forgetful=True)
    assert result["outcome"] == "failed"
    assert any(p.startswith("fake_mail:") and "duplicates" in p for p in result["problems"]), result  # type: ignore[attr-defined,union-attr]
