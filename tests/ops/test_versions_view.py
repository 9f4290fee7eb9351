"""A deploy half done, as the operations figures show it (both backends): the live workers
from the registry, and per versioned task the jobs waiting for a newer worker, the same
in ``overview``, on the page, in ``/metrics`` and in ``pigeon jobs stats``."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from pigeon.cli import app as cli
from pigeon.jobs.app import App
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.registry import LIVE_FOR, Advert, live_workers
from pigeon.jobs.stores import store_for
from pigeon.ops.dashboard import dashboard_routes
from pigeon.ops.queries import overview
from pigeon.server.app import create_app
from pigeon.server.intake import Intake
from pigeon.storage.base import Database
from tests.server.conftest import OPERATOR, TestClient, operator_token


def tally_app(version: int) -> App:
    """The deploy's app at ``version`` of task "tally" (queue "billing"); "plain" never
    changes."""
    app = App()
    app.queue("billing")
    steps = {n: (lambda p: p) for n in range(1, version)}
    app.task(lambda n: None, queue="billing", name="tally", version=version, upcast=steps)
    app.task(lambda n: None, queue="billing", name="plain")
    return app


def _seed(db: Database) -> None:
    """Jobs of tally at versions 1, 2 (x3) and 3 (one queued, one leased by a v3 worker
    that died, one delayed), one of "plain", and two live workers of billing: one running
    tally v1, one v2. A third worker (v3) is long gone."""
    dead = JobManager(db, tally_app(3), clock=lambda: time.time() - 600)
    dead.enqueue(JobSpec("billing", "tally", {"n": 7}))  # due first: the dead worker's
    (leased,) = JobManager(db, tally_app(3)).lease_jobs("billing", "v3-worker", 1, lease=0.01)
    assert leased.version == 3
    for version, count in ((1, 1), (2, 3), (3, 1)):
        m = JobManager(db, tally_app(version))
        for n in range(count):
            m.enqueue(JobSpec("billing", "tally", {"n": n}))
    JobManager(db, tally_app(3)).enqueue(JobSpec("billing", "tally", {"n": 9}, delay=3600))
    JobManager(db, tally_app(1)).enqueue(JobSpec("billing", "plain", {"n": 1}))
    time.sleep(0.05)  # the dead worker's lease runs out
    store = store_for(db)
    for name, version in (("gen1", 1), ("gen2", 2)):
        assert Advert(store, name, tally_app(version), ["billing"]).advertise()
    assert Advert(store, "gen3", tally_app(3), ["billing"]).advertise()
    with db.transaction() as tx:  # its last renewal long ago: not live
        tx.sql(f"UPDATE pigeon_workers SET seen_at = seen_at - {2 * LIVE_FOR} WHERE name = 'gen3'")


def test_jobs_waiting_for_a_newer_worker_are_counted_alike_everywhere(
    db: Database, server_db_url: str
) -> None:
    _seed(db)
    assert [w.name for w in live_workers(store_for(db))] == ["gen1", "gen2"]
    view = overview(db, tally_app(2))
    versions = view["versions"]
    assert [w["name"] for w in versions["workers"]] == ["gen1", "gen2"]
    assert versions["workers"][0]["versions"] == {"plain": 1, "tally": 1}
    # Live workers run tally up to v2: the two v3 jobs that are due wait for a newer
    # worker (one queued, one whose v3 worker died); the delayed one is not due yet.
    assert versions["waiting"] == [
        {"task": "tally", "queue": "billing", "known": 2, "newest": 3, "waiting": 2}
    ]
    with TestClient(
        create_app(
            Intake(db),
            routes=dashboard_routes(db, tally_app(2)),
            operator=operator_token(),
            purge_interval=None,
        )
    ) as client:
        page = client.get("/pigeon/", headers=OPERATOR).text
        metrics = client.get("/metrics", headers=OPERATOR).text
    assert re.search(r'data-figure="versions\.tally\.waiting"[^>]*>2<', page)
    assert "2 live workers" in page
    samples = _samples(metrics)
    assert (
        samples["pigeon_jobs_waiting_newer_worker", (("queue", "billing"), ("task", "tally"))] == 2
    )
    assert samples["pigeon_workers_live", ()] == 2
    runner = CliRunner()
    result = runner.invoke(cli, ["jobs", "stats", "--db", server_db_url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["versions"]["waiting"] == versions["waiting"]
    text = runner.invoke(cli, ["jobs", "stats", "--db", server_db_url]).output
    assert "2 live workers" in text and "tally" in text and "v3" in text


def test_a_worker_in_step_with_the_jobs_leaves_nothing_waiting(db: Database) -> None:
    _seed(db)
    assert Advert(store_for(db), "gen3-new", tally_app(3), ["billing"]).advertise()
    (entry,) = overview(db, tally_app(3))["versions"]["waiting"]
    assert (entry["known"], entry["waiting"]) == (3, 0)
    # Withdrawn (a worker that stopped): the registry forgets it at once.
    Advert(store_for(db), "gen3-new", tally_app(3), ["billing"]).withdraw()
    (entry,) = overview(db, tally_app(3))["versions"]["waiting"]
    assert (entry["known"], entry["waiting"]) == (2, 2)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], Any]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_jobs_of_a_task_no_live_worker_knows_wait_for_a_newer_worker(
    db: Database, server_db_url: str
) -> None:
    """A deploy that adds a task ("added", enqueued by a new intake while only old workers
    run) and one that removed a task ("dropped", with jobs left): each is counted, by task,
    as waiting for a newer worker (none knows it: known 0); a task the live workers know
    at version 1 is not."""
    newer = tally_app(1)
    newer.task(lambda n: None, queue="billing", name="added")
    gone = App()
    gone.task(lambda n: None, queue="billing", name="dropped")
    for n in range(3):
        JobManager(db, newer).enqueue(JobSpec("billing", "added", {"n": n}))
    JobManager(db, newer).enqueue(JobSpec("billing", "plain", {"n": 1}))
    JobManager(db, newer).enqueue(JobSpec("billing", "added", {"n": 9}, delay=3600))
    JobManager(db, gone).enqueue(JobSpec("billing", "dropped", {"n": 1}))
    JobManager(db).enqueue(JobSpec("other", "dropped", {"n": 2}))  # no live worker there
    assert Advert(store_for(db), "gen1", tally_app(1), ["billing"]).advertise()
    view = overview(db, newer)
    assert view["versions"]["waiting"] == [
        {"task": "added", "queue": "billing", "known": 0, "newest": 1, "waiting": 3},
        {"task": "dropped", "queue": "billing", "known": 0, "newest": 1, "waiting": 1},
    ]
    assert "versions.added.waiting" not in view["estimated"]
    text = CliRunner().invoke(cli, ["jobs", "stats", "--db", server_db_url]).output
    assert re.search(r"added .*billing .*not the task .*v1 .*3", text), text
    with TestClient(
        create_app(
            Intake(db),
            routes=dashboard_routes(db, newer),
            operator=operator_token(),
            purge_interval=None,
        )
    ) as client:
        page = client.get("/pigeon/", headers=OPERATOR).text
    assert re.search(r"<td>not the task</td><td>v1</td>\s*<td class=\"bad\"><span[^>]*>3<", page)
    # A head read cut short (cap 2: the two oldest due): a floor, marked as not exact.
    capped = overview(db, newer, cap=2)
    assert [(e["task"], e["waiting"]) for e in capped["versions"]["waiting"]] == [("added", 2)]
    assert "versions.added.waiting" in capped["estimated"]
    # The new generation knows "added": only the removed task's job still waits.
    assert Advert(store_for(db), "gen2", newer, ["billing"]).advertise()
    assert overview(db, newer)["versions"]["waiting"] == [
        {"task": "dropped", "queue": "billing", "known": 0, "newest": 1, "waiting": 1}
    ]
