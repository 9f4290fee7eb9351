"""pigeon.ops.queries.overview against the database's own figures (plain GROUP BYs) on a
seeded scenario with failures, on SQLite and PostgreSQL; the four readers (page, JSON,
/metrics, ``pigeon jobs stats``) agree; counts past the cap are labelled estimates."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from pigeon.cli import app as cli
from pigeon.ops.queries import overview
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests.ops.scenario import APP, figures, ops_app, seed, truth
from tests.server.conftest import OPERATOR, TestClient, live_server

# x 3 obligations, seeded set-based past 1,000 (tests/ops/scenario.py): a few seconds a
# backend; bench/ops_bench.py times the page at 1,000,000 jobs.
N_RECORDS = 10_000


def expected_figures(t: dict[str, Any]) -> dict[str, int]:
    found = {
        "records.received": t["records"]["received"],
        "records.completed": t["records"]["completed"],
        "records.open": t["records"]["received"] - t["records"]["completed"],
        "reconciliation.effects_recorded": t["effects"],
        "reconciliation.notifications.created": t["outbox"]["created"],
        "reconciliation.notifications.confirmed": t["outbox"]["confirmed"],
        "relay.pending": t["outbox"]["created"] - t["outbox"]["confirmed"],
        "reconciliation.without_job": 0,
        "failed.total": sum(t["failed_groups"].values()),
    }
    for name, counts in t["obligations"].items():
        for status, n in counts.items():
            found[f"obligations.{name}.{status}"] = n
    for queue, states in t["queues"].items():
        for state in ("ready", "delayed", "reserved", "stuck", "last_hour.succeeded"):
            found[f"queues.{queue}.{state}"] = states.get(state, 0)
        found[f"queues.{queue}.last_hour.failed"] = states.get("last_hour.failed", 0)
    # every record of the scenario is in the window: created = all obligations
    for name, counts in t["obligations"].items():
        found[f"reconciliation.created.{name}"] = sum(counts.values())
        found[f"reconciliation.completed.{name}"] = counts["completed"]
    found["reconciliation.created_total"] = sum(sum(c.values()) for c in t["obligations"].values())
    found["reconciliation.completed_total"] = sum(c["completed"] for c in t["obligations"].values())
    for (owner, queue, error_class), n in t["failed_groups"].items():
        found[f"failed.{owner}.{queue}.{error_class}"] = n
    return found


def test_overview_equals_the_database_on_a_seeded_scenario(notes_db: Database) -> None:
    seed(notes_db, N_RECORDS)
    now = time.time()
    view = overview(notes_db, APP, now=now)
    t = truth(notes_db, now, 24 * 3600)
    assert view["estimated"] == []
    assert figures(view) == expected_figures(t)
    # The page itself, rendered by the app: each of its figures is the database's.
    app = ops_app(notes_db)
    with TestClient(app) as client:
        page = client.get("/pigeon/", headers=OPERATOR)
    assert page.status_code == 200
    page_figures = _page_figures(page.text)
    assert len(page_figures) >= 40
    assert page_figures == {k: expected_figures(t)[k] for k in page_figures}
    # the scenario's shape, so the comparison above compares something
    n = N_RECORDS
    assert view["records"] == {"received": n, "completed": 0, "open": n}
    assert view["obligations"]["grading"]["failed"] == n // 50
    assert view["obligations"]["notify"]["failed"] == n // 10
    audit = view["obligations"]["audit"]
    assert (audit["in_progress"], audit["pending"]) == (n // 10 + n // 100, n - n // 10 - n // 100)
    assert 590 < audit["oldest_owed_age"] < 700
    queues = {q["queue"]: q for q in view["queues"]}
    assert (queues["audit"]["stuck"], queues["audit"]["reserved"]) == (n // 100, n // 10)
    assert queues["audit"]["breach"] and not queues["grading"]["breach"]
    assert queues["grading"]["last_hour"]["succeeded"] == n - n // 50
    assert queues["grading"]["workers"] == {"busy": 0, "budget": 12}
    classes = {(g["owner"], g["error_class"]) for g in view["failed"]["groups"]}
    assert classes == {
        ("grading-team", "PermanentError"),
        ("grading-team", "ProviderDown"),
        ("comms-team", "PermanentError"),
    }
    group = view["failed"]["groups"][0]
    assert group["jobs"] and group["jobs"][0]["history"][0]["outcome"] == "failed"
    rec = view["reconciliation"]
    assert rec["created_total"] == 3 * n and rec["without_job"]["count"] == 0


def test_a_pending_obligation_without_a_job_is_reported(notes_db: Database) -> None:
    seed(notes_db, 20)
    with notes_db.transaction() as tx:
        # the audit jobs finish without settling their obligations (written by hand)
        tx.sql("UPDATE pigeon_jobs SET status = 'succeeded' WHERE queue = 'audit'", {})
    view = overview(notes_db, APP)
    assert view["reconciliation"]["without_job"]["count"] == 20


@pytest.mark.postgres
def test_large_counts_are_capped_and_labelled_estimates(notes_pg: Database) -> None:
    seed(notes_pg, 300)
    with notes_pg.transaction() as tx:
        tx.sql("ANALYZE", {})
    view = overview(notes_pg, APP, cap=50, large_table=0)
    assert "records.received" in view["estimated"]
    assert "obligations.grading.completed" in view["estimated"]
    assert "queues.audit.stuck" not in view["estimated"]  # 3 of them: under the cap, exact
    exact = overview(notes_pg, APP)
    assert exact["estimated"] == []
    # an estimate is the planner's, never below what the capped count saw
    assert view["records"]["received"] >= 51
    assert view["queues"][0]["stuck"] == exact["queues"][0]["stuck"]


def _page_figures(html: str) -> dict[str, int]:
    return {
        m.group(1): int(m.group(2).replace(",", ""))
        for m in re.finditer(r'data-figure="([^"]+)"[^>]*>≈?([\d,]+)<', html)
    }


def _metric_figures(text: str) -> dict[str, int]:
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    found: dict[str, int] = {}
    for (name, labels), value in samples.items():
        lab = dict(labels)
        if name == "pigeon_records":
            found[f"records.{lab['status']}"] = int(value)
        elif name == "pigeon_obligations":
            found[f"obligations.{lab['name']}.{lab['status']}"] = int(value)
        elif name == "pigeon_jobs" and lab["state"] in ("ready", "delayed", "reserved", "stuck"):
            found[f"queues.{lab['queue']}.{lab['state']}"] = int(value)
        elif name == "pigeon_failed_jobs_by_class":
            key = f"failed.{lab['owner']}.{lab['queue']}.{lab['error_class']}"
            found[key] = int(value)
        elif name == "pigeon_relay_pending":
            found["relay.pending"] = int(value)
        elif name == "pigeon_records_without_job":
            found["reconciliation.without_job"] = int(value)
    return found


def test_the_page_the_json_the_metrics_and_the_cli_agree(server_db_url: str) -> None:
    notes_db = open_server_db(server_db_url)
    seed(notes_db, 200)
    app = ops_app(notes_db)
    with live_server(app) as url:
        view = httpx.get(url + "/pigeon/v1/dashboard", headers=OPERATOR, timeout=30).json()
        metrics = httpx.get(url + "/metrics", headers=OPERATOR, timeout=30).text
        page = httpx.get(url + "/pigeon/", headers=OPERATOR, timeout=30).text
    result = CliRunner().invoke(
        cli, ["jobs", "stats", "--db", server_db_url, "--app", "tests.ops.scenario:APP", "--json"]
    )
    assert result.exit_code == 0, result.output
    from_cli = json.loads(result.output)
    want = figures(view)
    assert figures(from_cli) == want
    page_figures = _page_figures(page)
    assert {k: want[k] for k in page_figures} == page_figures
    assert set(want) - set(page_figures) <= set()  # every figure is on the page
    metric_figures = _metric_figures(metrics)
    assert {k: want[k] for k in metric_figures} == metric_figures
    assert len(metric_figures) >= 20
    notes_db.close()
