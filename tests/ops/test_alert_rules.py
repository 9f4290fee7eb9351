"""ops/: the Prometheus alert rules pass ``promtool check rules`` (Debian's prometheus
package) and their unit tests (``promtool test rules``), and every metric the rules and the
Grafana board name is exported by /metrics or, for an edge queue's, by its exporter
(`pigeon.ops.edge_metrics`)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pigeon import OfflineQueue
from pigeon.jobs.app import App
from pigeon.jobs.registry import Advert
from pigeon.jobs.stores import store_for
from pigeon.ops.edge_metrics import serve_edge_metrics
from pigeon.storage.server import open_server_db
from tests import processes
from tests.ops.scenario import ops_app, seed
from tests.server.conftest import OPERATOR, live_server

OPS = Path(__file__).resolve().parents[2] / "ops"
RULES = OPS / "prometheus" / "pigeon-rules.yml"
RULE_TESTS = OPS / "prometheus" / "pigeon-rules.test.yml"
BOARD = OPS / "grafana" / "pigeon-dashboard.json"
METRIC = re.compile(r"\bpigeon_[a-z_]+")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("PIGEON_REQUIRE_PG") == "1":
            pytest.fail("promtool is missing: apt-get install -y prometheus")
        pytest.skip("promtool is missing: apt-get install -y prometheus")
    return found


def test_promtool_accepts_the_rules() -> None:
    result = processes.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_the_rules_fire_as_their_unit_tests_say() -> None:
    """``pigeon-rules.test.yml``: an alert pending, then firing with its summary, then
    resolved, on series made up for it (the waiting-for-a-newer-worker alert's, so far)."""
    result = processes.run(
        [_promtool(), "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert "PigeonJobsWaitingForNewerWorker" in tested


def _named(text: str) -> set[str]:
    return set(METRIC.findall(text))


def test_every_metric_the_rules_and_the_board_name_is_exported(tmp_path: Path) -> None:
    rules = "\n".join(
        line.split("expr:", 1)[1] for line in RULES.read_text().splitlines() if "expr:" in line
    )
    board = json.loads(BOARD.read_text())
    exprs = "\n".join(t["expr"] for p in board["panels"] for t in p["targets"])
    db = open_server_db(str(tmp_path / "server.db"))
    seed(db, 20)
    # A live worker of queue "audit" that lacks its task: the audit jobs wait for a newer
    # one (pigeon_jobs_waiting_newer_worker has a sample to show).
    stale = App()
    stale.task(lambda: None, queue="audit", name="other")
    assert Advert(store_for(db), "stale", stale, ["audit"]).advertise()
    app = ops_app(db)
    with live_server(app) as url:
        text = httpx.get(url + "/metrics", headers=OPERATOR, timeout=30).text
    db.close()
    with OfflineQueue(tmp_path / "edge.db") as queue, serve_edge_metrics(queue, 0) as edge:
        text += httpx.get(f"http://127.0.0.1:{edge.port}/metrics", timeout=30).text
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    named = _named(rules) | _named(exprs)
    assert len(_named(rules)) >= 6
    assert {"pigeon_edge_oldest_age_seconds", "pigeon_edge_dead"} <= _named(rules)
    assert named - exported == set()
