"""Short paths (issue 15): an enqueue reads top to bottom from `OfflineQueue.enqueue` to
the body of its transaction. Measured on the real call stack of a real enqueue: the
policy (enqueue) hands the item to the group commit (`CommitBatcher.submit`, whose
leader commits it), which calls the store (`EdgeStore.append`), which runs the
transaction's body (`pigeon.edge.sqlite.append.write`) in the storage layer's transaction
runner. A test, so the path does not grow again."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest

from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.sqlite import append, store


def test_an_enqueue_reaches_its_transaction_in_three_calls_of_the_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stacks: list[list[str]] = []
    write = append.write

    def recording(*args: Any, **kwargs: Any) -> Any:
        stacks.append([frame.name for frame in traceback.extract_stack()])
        return write(*args, **kwargs)

    monkeypatch.setattr(store, "write", recording)
    with OfflineQueue(tmp_path / "q.db", QueueOptions(durability="normal")) as queue:
        queue.enqueue("create", "note:1", {"title": "t"})
    names = stacks[0]
    below = names[len(names) - 1 - names[::-1].index("enqueue") :]
    # enqueue -> CommitBatcher.submit (-> _lead: the leader) -> EdgeStore.append
    # (-> SQLiteDatabase.run_in_transaction: BEGIN ... COMMIT) -> write
    assert below == ["enqueue", "submit", "_lead", "append", "run_in_transaction", "recording"]
