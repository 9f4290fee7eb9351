"""``crash-before-commit``: the server dies in the middle of a request, before its commit.
Nothing of it may remain, and the client's retry under the same key must run it afresh.

Two ways in, alternately, for each faulted request:

- killed: the request holds its claim (``X-Pigeon-Test-Delay-Ms``) and the server is
  SIGKILLed meanwhile, then started again on its port;
- failed: the handler runs, writes, and then fails (``X-Pigeon-Test-Fail``: an exception
  after the handler, before the commit); what it wrote through pigeon's transaction rolls
  back, and anything it wrote elsewhere stays: a duplicate once the retry writes it again.

The client then settles the request under its key. Passes when the faulted requests left
what their twins left, and no retry was answered as a replay (nothing had committed).
"""

from __future__ import annotations

import threading
import time

from pigeon.rehearse.client import Answer
from pigeon.rehearse.makers import Planned
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage, twins
from pigeon.server.testhooks import DELAY, FAIL

HOLD_MS = 4000  # the killed request's claim is held this long...
KILL_AFTER = 0.8  # ...and the server SIGKILLed this long after the request left
PER_SCALE = 2


def _play(stage: Stage, result: ScenarioResult) -> None:
    count = 2 * PER_SCALE * stage.scale
    kinds: list[str] = []

    def killed(planned: Planned) -> Answer:
        sent = threading.Thread(target=stage.client.send, args=(planned, {DELAY: str(HOLD_MS)}))
        sent.start()
        time.sleep(KILL_AFTER)
        stage.server.kill()
        sent.join()
        stage.restart_server()
        return stage.client.settle(planned, attempts=1)

    def failed(planned: Planned) -> Answer:
        first = stage.client.send(planned, {FAIL: "1"})
        if first is None or first.status_code < 500:
            shown = "no answer" if first is None else first.status_code
            result.problem(
                f"{planned.principal}: the failing request was answered {shown}, not 5xx"
            )
        return stage.client.settle(planned, attempts=1)

    def fault(planned: Planned) -> Answer:
        kinds.append("killed" if len(kinds) % 2 == 0 else "failed")
        return (killed if kinds[-1] == "killed" else failed)(planned)

    result.did(
        f"sent {count} requests: half held {HOLD_MS} ms and the server SIGKILLed "
        f"{KILL_AFTER} s in (restarted), half failing after their handler ran; each retried"
    )
    sent = twins(stage, result, "cbc", count, fault)
    result.did(f"server killed {kinds.count('killed')} times")
    for planned, answer, _ in sent:
        if answer.replayed:
            result.problem(
                f"{planned.principal}: the retry was a replay: the crashed attempt committed"
            )


SCENARIO = Scenario(
    "crash-before-commit", "the server dies before the commit: nothing remains", _play
)
