"""``duplicate-concurrent``: several copies of one request at once (a retry racing its
original, a double tap): one runs, the others get its answer, nothing happens twice.

Each faulted request is sent as ``COPIES`` copies under its one key at the same moment;
the first holds its claim for a while (``X-Pigeon-Test-Delay-Ms``) so that the others
meet it in progress. Every copy is settled as a client would (409 "in progress" is sent
again). Passes when the copies left what one twin left, every copy got the same status,
and exactly one copy was executed (the others are replays).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pigeon.rehearse.client import Answer
from pigeon.rehearse.makers import Planned
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage, one_by_one, twins
from pigeon.server.testhooks import DELAY

COPIES = 3
HOLD_MS = 500  # the first copy's claim is held this long: the others arrive meanwhile
PER_SCALE = 4


def _play(stage: Stage, result: ScenarioResult) -> None:
    count = PER_SCALE * stage.scale
    executed: list[int] = []

    def fault(planned: Planned) -> Answer:
        with ThreadPoolExecutor(COPIES) as pool:
            first = pool.submit(stage.client.settle, planned, first={DELAY: str(HOLD_MS)})
            others = [pool.submit(stage.client.settle, planned) for _ in range(COPIES - 1)]
            answers = [first.result(), *(o.result() for o in others)]
        statuses = {a.status for a in answers}
        if len(statuses) > 1:
            result.problem(
                f"{planned.principal}: the copies were answered {sorted(map(str, statuses))}"
            )
        executed.append(sum(not a.replayed for a in answers if a.ok))
        return answers[0]

    result.did(
        f"sent {count} requests as {COPIES} copies each at once, the first held {HOLD_MS} ms"
    )
    twins(stage, result, "dup", count, one_by_one(fault))
    result.requests += (COPIES - 1) * count
    twice = [n for n in executed if n > 1]
    if twice:
        result.problem(f"{len(twice)} requests were executed more than once (not replayed)")


SCENARIO = Scenario("duplicate-concurrent", "copies of one request at once: one runs", _play)
