"""``crash-before-commit``: the server dies in the middle of a request, after its handler
wrote and before the commit. Nothing of it may remain, and the client's retry under the
same key must run it afresh.

Two ways in, alternately, for each faulted request:

- killed: the handler runs and writes, then the server SIGKILLs itself before the commit
  (``X-Pigeon-Test-Crash: before-commit``) and is started again on its port;
- failed: the handler runs, writes, and then fails (``X-Pigeon-Test-Fail``: an exception
  after the handler, before the commit).

What the handler wrote through pigeon's transaction is gone either way; anything it wrote
elsewhere (its own connection, a provider) stays, and becomes a duplicate once the retry
writes it again. The client then settles the request under its key. Passes when the
faulted requests left what their twins left, and no retry was answered as a replay
(nothing had committed).
"""

from __future__ import annotations

from pigeon.rehearse.client import Answer
from pigeon.rehearse.makers import Planned
from pigeon.rehearse.report import ScenarioResult
from pigeon.rehearse.stage import Scenario, Stage, one_by_one, twins
from pigeon.server.testhooks import CRASH, FAIL

PER_SCALE = 2


def _play(stage: Stage, result: ScenarioResult) -> None:
    count = 2 * PER_SCALE * stage.scale
    kinds: list[str] = []

    def killed(planned: Planned) -> Answer:
        first = stage.client.send(planned, {CRASH: "before-commit"})
        if first is not None:
            shown = first.status_code
            result.problem(f"{planned.principal}: answered {shown}: the server did not die")
        stage.server.kill()  # reaped, or killed if it did not die
        stage.restart_server()
        return stage.client.settle(planned, attempts=1)

    def failed(planned: Planned) -> Answer:
        first = stage.client.send(planned, {FAIL: "1"})
        if first is None or first.status_code < 500:
            shown = "no answer" if first is None else first.status_code
            result.problem(f"{planned.principal}: the failing request was answered {shown}")
        return stage.client.settle(planned, attempts=1)

    def fault(planned: Planned) -> Answer:
        kinds.append("killed" if len(kinds) % 2 == 0 else "failed")
        return (killed if kinds[-1] == "killed" else failed)(planned)

    result.did(
        f"sent {count} requests: half SIGKILLed the server after their handler wrote, "
        "half failed after it (an exception); each retried under its key"
    )
    sent = twins(stage, result, "cbc", count, one_by_one(fault))
    result.did(f"server killed {kinds.count('killed')} times")
    for planned, answer, _ in sent:
        if answer.replayed:
            result.problem(
                f"{planned.principal}: the retry was a replay: the crashed attempt committed"
            )


SCENARIO = Scenario(
    "crash-before-commit", "the server dies before the commit: nothing remains", _play
)
