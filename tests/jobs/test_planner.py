from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError
from pigeon.jobs import planner


def test_issue_figures() -> None:
    p = planner.plan(1000, 0.12, 50, 10, workers=[6, 12, 18])
    assert p.min_workers == 18
    rows = {r.workers: r for r in p.rows}
    assert (rows[6].throughput, rows[6].net_drain, rows[6].drain_seconds) == (50, 0, None)
    assert (rows[12].throughput, rows[12].net_drain, rows[12].drain_seconds) == (100, 50, 20)
    assert (rows[18].throughput, rows[18].net_drain, rows[18].drain_seconds) == (150, 100, 10)


def test_issue_figures_without_arrivals() -> None:
    p = planner.plan(1000, 0.12, 0, 10, workers=[12])
    (row,) = p.rows
    assert row.drain_seconds == 10
    assert row.waves == 84
    assert row.wave_seconds == pytest.approx(10.08)


def test_memory_budget() -> None:
    assert planner.memory_budget(10, 128) == 1280
    (row,) = planner.plan(10, 1, 0, 10, workers=[10], memory_per_worker=128).rows
    assert row.memory_mib == 1280


def test_default_worker_counts_include_minimum() -> None:
    p = planner.plan(1000, 0.12, 50, 10)
    assert [r.workers for r in p.rows] == [6, 12, 18]


def test_bad_input_is_named() -> None:
    with pytest.raises(ConfigurationError, match="service time"):
        planner.plan(10, 0, 1, 1)
    with pytest.raises(ConfigurationError, match="target"):
        planner.plan(10, 1, 1, 0)


@given(
    st.integers(0, 100_000),
    st.floats(0.001, 10),
    st.floats(0, 1000),
    st.floats(0.1, 10_000),
)
def test_min_workers_meets_the_target(b: int, s: float, lam: float, t: float) -> None:
    w = planner.min_workers(b, s, lam, t)
    drain = planner.drain_seconds(b, w, s, lam)
    if b > 0:
        assert drain is not None and drain <= t * (1 + 1e-6)
    # one fewer worker would miss it (unless we are already at the floor of one)
    if w > 1:
        fewer = planner.drain_seconds(b, w - 1, s, lam)
        assert fewer is None or fewer > t * (1 - 1e-6) or b == 0
