"""``crash-after-commit``: the server commits a request and dies before it answers. The
client never heard; its retry under the same key must be answered from what committed (a
replay), and nothing of the request may be done twice or left undone.

Each faulted request asks the server to SIGKILL itself once the request has committed
(``X-Pigeon-Test-Crash: after-commit``: after the commit, before any answer or anything
the app does "after commit"); the server is started again on its port and the client
settles the request. Passes when every retry was a replay with its twin's status and the
faulted requests left what their twins left, their jobs included: a job enqueued after
the commit, outside the transaction, is lost here.
"""

from __future__ import annotations

from pigeon.rehearse.client import Answer
from pigeon.rehearse.makers import Planned
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage, one_by_one, twins
from pigeon.server.testhooks import CRASH

PER_SCALE = 3


def _play(stage: Stage, result: ScenarioResult) -> None:
    count = PER_SCALE * stage.scale

    def crashed(planned: Planned) -> Answer:
        first = stage.client.send(planned, {CRASH: "after-commit"})
        if first is not None:
            result.problem(
                f"{planned.principal}: answered {first.status_code}: the server did not die "
                "after the commit (are the test hooks on?)"
            )
        stage.server.kill()  # reaped (it died by itself), or killed if it did not
        stage.restart_server()
        return stage.client.settle(planned, attempts=1)

    result.did(f"sent {count} requests, the server SIGKILLed after each one's commit, restarted")
    sent = twins(stage, result, "cac", count, one_by_one(crashed))
    result.did(f"server killed {count} times; each request retried under its key")
    for planned, answer, _ in sent:
        if answer.ok and not answer.replayed:
            result.problem(
                f"{planned.principal}: the retry ran again instead of replaying what committed"
            )


SCENARIO = Scenario(
    "crash-after-commit", "the server dies after the commit: the retry replays", _play
)
