"""``deploy-mid-job``: a rolling deploy while jobs run. The next generation of workers
(``--next-jobs``: the app's jobs as the new version declares them, its changed payloads
with their upcasters) starts while the current one still holds jobs; the current one is
SIGTERMed (finish or hand back within the lease) with jobs in flight. Nothing may be lost
or done twice, and the jobs the old code made (old payloads) must run on the new code.

The twins run on the current generation. Then the faulted requests are sent, `SENDERS`
at a time; halfway, the current generation is SIGTERMed (its jobs in flight) and the next
one starts while the rest arrive: their jobs, made by the old intake, wait for the new
code. The jobs drain on the next generation alone. The two groups must leave the same
rows, and as many of their jobs must succeed. Afterwards the current generation is
started again for whatever runs next.

Without ``--next-jobs`` the same app is deployed again: the drain is rehearsed, a
payload change is not (the report says so).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from pigeon.rehearse import shim
from pigeon.rehearse.children import Workers
from pigeon.rehearse.client import Answer
from pigeon.rehearse.makers import Planned
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage, twins
from pigeon.rehearse.tally import SQL

PER_SCALE = 8
SENDERS = 8


def _generation(stage: Stage, jobs: str) -> Workers:
    """Workers like the current ones, running ``jobs``."""
    current = stage.workers
    if current.jobs == shim.SHIM:
        return dataclasses.replace(current, env={**current.env, shim.JOBS: jobs}, proc=None)
    return dataclasses.replace(current, jobs=jobs, proc=None)


def _open_jobs(stage: Stage) -> int:
    with stage.ledger.db.transaction() as tx:
        return sum(int(r["n"]) for r in SQL.run(tx, "open_by_queue").fetchall())


def _play(stage: Stage, result: ScenarioResult) -> None:
    count = PER_SCALE * stage.scale
    current = stage.workers
    nxt = _generation(stage, stage.next_jobs or current.jobs)
    at_deploy: list[int] = []

    def deploy(planned: list[Planned]) -> list[Answer]:
        half = len(planned) // 2
        with ThreadPoolExecutor(SENDERS) as pool:
            first = list(pool.map(stage.client.settle, planned[:half]))
            at_deploy.append(_open_jobs(stage))
            current.terminate()  # SIGTERM: stop claiming, finish or hand back what it holds
            nxt.start()
            stage.workers = nxt
            rest = list(pool.map(stage.client.settle, planned[half:]))
        current.stop()
        at_deploy.append(_open_jobs(stage))
        return first + rest

    which = stage.next_jobs or "the same app again (no --next-jobs: no payload change)"
    result.did(f"deploying {which} while the jobs of {count} requests run")
    try:
        twins(stage, result, "dep", count, deploy)
    finally:
        stage.workers.stop()
        stage.workers = current
        current.start()
    started, left = [*at_deploy, 0, 0][:2]
    result.did(
        f"the next generation started with {started} jobs open; the current one was "
        f"SIGTERMed; {left} jobs were open when it had gone, for the next alone"
    )
    result.reconciliation.counts["jobs open at the deploy"] = started
    result.reconciliation.counts["open once it had gone"] = left


SCENARIO = Scenario(
    "deploy-mid-job", "a rolling deploy with jobs in flight: once each, old payloads upcast", _play
)
