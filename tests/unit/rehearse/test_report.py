"""The report's reconciliation: what a faulted group left against its twins'."""

from __future__ import annotations

import json

from pigeon.rehearse.report import Reconciliation, RunReport, ScenarioResult


def test_rows_above_the_twins_are_duplicates_and_below_are_lost() -> None:
    rec = Reconciliation(
        expected={"records": 4, "effects": 4, "jobs": 8, "orders": 4},
        found={"records": 5, "effects": 3, "jobs": 8, "orders": 4},
    )
    assert (rec.duplicates, rec.lost) == (1, 1)
    assert rec.effects == 3 + 4  # pigeon's effects and the app's own rows
    assert rec.problems() == [
        "effects: 3 rows where 4 were expected (1 lost)",
        "records: 5 rows where 4 were expected (1 duplicates)",
    ]


def test_a_skipped_scenario_is_never_a_pass_and_a_failed_one_fails_the_run() -> None:
    report = RunReport(app="a", jobs="j", database="d", scale=1)
    report.scenarios.append(ScenarioResult("one", "x").skip("no relay"))
    assert report.ok and report.counts() == {"passed": 0, "failed": 0, "skipped": 1}
    failed = ScenarioResult("two", "y")
    failed.problem("records: 2 rows where 1 were expected (1 duplicates)")
    report.scenarios.append(failed)
    assert not report.ok


def test_the_json_carries_the_reconciliation_and_its_totals() -> None:
    result = ScenarioResult("one", "x")
    result.reconciliation = Reconciliation(expected={"records": 1}, found={"records": 1})
    report = RunReport(app="a", jobs="j", database="d", scale=2, scenarios=[result])
    data = json.loads(report.dumps())
    assert data["ok"] is True and data["scale"] == 2
    rec = data["scenarios"][0]["reconciliation"]
    assert rec["duplicates"] == 0 and rec["lost"] == 0 and rec["found"] == {"records": 1}
