"""``provider-unknown``: a provider applies a job's call, and its answer is lost (a
timeout): the outcome is unknown. ``call_provider`` must ask the adapter's ``lookup`` and
take the result found, never calling again under a new key; the provider applies each
call once.

The twins run with the workers as they are; then the workers are started again with the
fault on (`pigeon.rehearse.shim`: the first call for each reference applies, then raises
``TimeoutError``) and the faulted requests are sent; then the workers start again without
it. The two groups must leave the same rows, the app's own tables included (where its
provider, or a stand-in for it, records what it applied: `RehearsalHooks.tables`), and
their jobs must succeed as the twins' did.

Skipped when the app names no provider adapter (`RehearsalHooks.providers`).
"""

from __future__ import annotations

from pathlib import Path

from pigeon.rehearse.client import Answer
from pigeon.rehearse.makers import Planned
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.shim import FAULT, FAULT_LOG
from pigeon.rehearse.stage import Scenario, Stage, one_by_one, twins

PER_SCALE = 4


def _restart(stage: Stage, fault: bool) -> None:
    stage.workers.stop()
    stage.workers.env[FAULT] = "1" if fault else "0"
    stage.workers.start()


def _play(stage: Stage, result: ScenarioResult) -> None:
    if not stage.hooks.providers:
        result.skip("the app names no provider adapter (RehearsalHooks.providers)")
        return
    log = Path(stage.workers.env[FAULT_LOG])
    log.write_text("")
    count = PER_SCALE * stage.scale

    def fault(planned: Planned) -> Answer:
        return stage.client.settle(planned)

    result.did(f"sent {count} requests; their twins first, with the providers as they are")
    try:
        twins(
            stage, result, "prov", count, one_by_one(fault), between=lambda: _restart(stage, True)
        )
    finally:
        _restart(stage, False)
    lost = len(log.read_text().splitlines())
    result.did(f"workers restarted losing each first provider answer: {lost} answers lost")
    result.reconciliation.counts["provider answers lost"] = lost
    if lost == 0:
        result.problem("no provider call was made by the faulted requests' jobs: nothing to find")


SCENARIO = Scenario(
    "provider-unknown", "a provider's answer lost after it applied: found by lookup", _play
)
