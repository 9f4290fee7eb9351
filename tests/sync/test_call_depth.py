"""Short paths (issue 15): one sync cycle reads top to bottom in at most three calls from
the engine's public method. Measured on the real call stack of a real flush against a
live server: the frames from `SyncEngine.flush` down to `Executor.run_pass`."""

from __future__ import annotations

import traceback
from typing import Any

import pytest

from pigeon.edge.queue import OfflineQueue
from pigeon.sync.events import CycleReport
from pigeon.sync.executor import Executor
from tests.sync.conftest import MakeEngine


def test_a_flush_reaches_the_executor_in_three_calls(
    queue: OfflineQueue, make_engine: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    stacks: list[list[str]] = []
    run_pass = Executor.run_pass

    def recording(self: Executor, *args: Any, **kwargs: Any) -> tuple[CycleReport, Any]:
        stacks.append([frame.name for frame in traceback.extract_stack()])
        return run_pass(self, *args, **kwargs)

    monkeypatch.setattr(Executor, "run_pass", recording)
    queue.enqueue("create", "note:1", {"title": "t"})
    engine = make_engine()
    assert engine.flush()
    assert stacks and queue.pending == []
    names = stacks[0]
    below = names[len(names) - 1 - names[::-1].index("flush") :]
    # flush -> _flush -> Lanes.run -> (run_pass, here: the recording frame)
    assert below == ["flush", "_flush", "run", "recording"], below
