"""The failure list, one module per scenario, in the order a run plays them.

Each module holds one ``SCENARIO`` (`pigeon.rehearse.stage.Scenario`): its name, a line
saying what it proves, and how it is played.
"""

from __future__ import annotations

from pigeon.rehearse.scenarios import (
    bad_payload,
    crash_after_commit,
    crash_before_commit,
    deploy_mid_job,
    duplicate_concurrent,
    peak,
    provider_unknown,
    relay_down,
    revoked_access,
)
from pigeon.rehearse.stage import Scenario

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        crash_before_commit.SCENARIO,
        crash_after_commit.SCENARIO,
        duplicate_concurrent.SCENARIO,
        relay_down.SCENARIO,
        provider_unknown.SCENARIO,
        bad_payload.SCENARIO,
        revoked_access.SCENARIO,
        peak.SCENARIO,
        deploy_mid_job.SCENARIO,
    )
}
