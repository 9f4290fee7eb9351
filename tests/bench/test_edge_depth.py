"""The edge bench's depth rows (bench/edge_bench.py): both depths are sampled in turns,
so a slow spell of the machine falls on each alike, and every sample reaches its queue."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from bench import edge_bench
from pigeon.edge.queue import OfflineQueue


def test_the_depths_are_sampled_in_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []

    class Recorded(OfflineQueue):
        def enqueue(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(("enqueue", Path(self.path).name))
            return super().enqueue(*args, **kwargs)

        def next_batch(self, n: int = 100) -> Any:
            calls.append(("next_batch", Path(self.path).name))
            return super().next_batch(n)

    monkeypatch.setattr(edge_bench, "OfflineQueue", Recorded)
    depths = [(tmp_path / "shallow.db", 10), (tmp_path / "deep.db", 300)]
    costs = edge_bench._depth_costs(depths, 20)

    assert all(math.isfinite(c) and c > 0 for pair in costs for c in pair)
    for kind, rounds in (("enqueue", 20), ("next_batch", 2)):
        order = [name for k, name in calls if k == kind]
        expected = [["shallow.db", "deep.db"], ["deep.db", "shallow.db"]] * (rounds // 2)
        assert order == [name for pair in expected for name in pair]
    for path, depth in depths:  # every enqueue landed, every batch taken was released
        with OfflineQueue(path) as queue:
            stats = queue.stats()
        assert (stats.depth, stats.in_flight) == (depth + 20, 0)
