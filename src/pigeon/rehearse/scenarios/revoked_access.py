"""``revoked-access``: principals lose access while their jobs wait. Every waiting job of
theirs must end in the failed store, for good, with an owner to look at it; the jobs of
principals who kept access must run as usual.

The workers are stopped (SIGTERM); requests are accepted for principals of two groups;
one group is revoked (`RehearsalHooks.revoke`, by default pigeon's list of revoked
principals, which the tasks' ``access`` re-checks read); the workers start again and the
jobs drain. A job is the principal's when it is an obligation of a record made by that
principal (``records.accept(..., principal=ctx.principal)``, as the intake passes it).

Skipped when no task of the app declares an access re-check, or when no request made a
job tied to its principal: there is nothing such a revocation could stop.
"""

from __future__ import annotations

from typing import Any

from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage

PER_SCALE = 4  # requests per group


def _send(stage: Stage, result: ScenarioResult, group: str, count: int) -> None:
    for i in range(count):
        answer = stage.client.settle(stage.makers.plan(f"rev-{group}{i}"))
        result.answered(answer.status)
        if not answer.ok:
            result.problem(f"rev-{group}{i}: the request was answered {answer.status}, not 2xx")
    result.requests += count


def _revoke(stage: Stage, principals: list[str]) -> None:
    with stage.ledger.db.transaction() as tx:
        for principal in principals:
            stage.hooks.revoke(tx, principal)


def _check(stage: Stage, result: ScenarioResult, jobs: list[dict[str, Any]]) -> None:
    rec = result.reconciliation
    revoked = [j for j in jobs if j["principal"].startswith("rev-r")]
    kept = [j for j in jobs if j["principal"].startswith("rev-k")]
    checked = {name for name, task in stage.jobs.tasks.items() if task.access is not None}
    ran = [j for j in revoked if j["succeeded"] or j["status"] == "succeeded"]
    failed = [j for j in revoked if j["status"] == "failed"]
    rec.counts = {
        "jobs of revoked principals": len(revoked),
        "of them in the failed store": len(failed),
        "of them run": len(ran),
        "jobs of principals who kept access": len(kept),
        "of them succeeded": sum(j["status"] == "succeeded" for j in kept),
    }
    rec.failed_with_owner = sum(j["owner"] is not None for j in failed)
    rec.failed_without_owner = len(failed) - rec.failed_with_owner
    for task in sorted({j["task"] for j in ran}):
        n = sum(j["task"] == task for j in ran)
        why = "" if task in checked else ": it declares no access re-check"
        result.problem(f"task {task!r} ran {n} jobs of revoked principals{why}")
    others = [j for j in revoked if j not in ran and j["status"] != "failed"]
    if others:
        result.problem(f"{len(others)} jobs of revoked principals neither ran nor failed")
    if rec.failed_without_owner:
        result.problem(
            f"{rec.failed_without_owner} jobs of revoked principals failed with no owner"
        )
    lost = [j for j in kept if j["status"] != "succeeded"]
    if lost:
        result.problem(f"{len(lost)} jobs of principals who kept access did not succeed")


def _play(stage: Stage, result: ScenarioResult) -> None:
    if not any(task.access is not None for task in stage.jobs.tasks.values()):
        result.skip("no task of the app declares an access re-check (@app.task(access=...))")
        return
    count = PER_SCALE * stage.scale
    stage.workers.stop()
    result.did("stopped the workers (SIGTERM)")
    _send(stage, result, "k", count)
    _send(stage, result, "r", count)
    jobs = stage.ledger.jobs_of("rev-")
    result.jobs = len(jobs)
    if not jobs:
        stage.workers.start()
        result.skip("no request made a job tied to its principal (a record's obligation)")
        return
    revoked = sorted({j["principal"] for j in jobs if j["principal"].startswith("rev-r")})
    _revoke(stage, revoked)
    result.did(f"accepted {2 * count} requests; revoked {len(revoked)} of their principals")
    stage.workers.start()
    result.did(f"started the workers: {len(jobs)} jobs waiting")
    result.reconciliation.drain_seconds = stage.drain(result, "the revoked and kept principals")
    _check(stage, result, stage.ledger.jobs_of("rev-"))


SCENARIO = Scenario(
    "revoked-access", "access lost while jobs wait: they fail, with their owner", _play
)
