"""Capacity planning for a job queue. Pure maths, no I/O.

With w workers each taking s seconds per job, a queue drains at w/s jobs per second;
against arrivals at λ per second the backlog B shrinks at w/s - λ (the net drain), so the
fluid drain time is B / (w/s - λ). To drain within a target T the workers must satisfy
w >= s * (λ + B/T). Jobs are indivisible, so with no arrivals the backlog really drains in
ceil(B / w) waves of s seconds each.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pigeon.exceptions import ConfigurationError

_EPS = 1e-9


@dataclass(frozen=True)
class PlanRow:
    workers: int
    throughput: float  # jobs per second
    net_drain: float  # jobs per second, after arrivals
    drain_seconds: float | None  # None: the backlog never drains
    waves: int  # ceil(B / w), indivisible-job waves
    wave_seconds: float  # waves * s: the drain bound when nothing new arrives
    memory_mib: float | None


@dataclass(frozen=True)
class Plan:
    backlog: int
    service_time: float
    arrival_rate: float
    target: float
    min_workers: int
    rows: tuple[PlanRow, ...]


def _check(backlog: float, service_time: float, arrival_rate: float, target: float) -> None:
    if backlog < 0:
        raise ConfigurationError(f"backlog must be >= 0, got {backlog}")
    if not service_time > 0:
        raise ConfigurationError(f"service time must be > 0 seconds, got {service_time}")
    if arrival_rate < 0:
        raise ConfigurationError(f"arrival rate must be >= 0 per second, got {arrival_rate}")
    if not target > 0:
        raise ConfigurationError(f"target must be > 0 seconds, got {target}")


def throughput(workers: int, service_time: float) -> float:
    return workers / service_time


def min_workers(backlog: float, service_time: float, arrival_rate: float, target: float) -> int:
    """Smallest w with w >= s * (λ + B/T)."""
    _check(backlog, service_time, arrival_rate, target)
    need = service_time * (arrival_rate + backlog / target)
    # Round away float noise first: 0.12 * (50 + 100) is 18.000000000000004.
    return max(1, math.ceil(round(need, 9)))


def drain_seconds(
    backlog: float, workers: int, service_time: float, arrival_rate: float
) -> float | None:
    net = throughput(workers, service_time) - arrival_rate
    if net <= _EPS:
        return None
    return round(backlog / net, 9)


def waves(backlog: int, workers: int) -> int:
    if workers < 1:
        raise ConfigurationError(f"workers must be >= 1, got {workers}")
    return math.ceil(backlog / workers)


def memory_budget(workers: int, per_worker_mib: float) -> float:
    if per_worker_mib < 0:
        raise ConfigurationError(f"memory per worker must be >= 0 MiB, got {per_worker_mib}")
    return workers * per_worker_mib


def plan(
    backlog: int,
    service_time: float,
    arrival_rate: float,
    target: float,
    workers: Iterable[int] | None = None,
    memory_per_worker: float | None = None,
) -> Plan:
    _check(backlog, service_time, arrival_rate, target)
    need = min_workers(backlog, service_time, arrival_rate, target)
    counts: Sequence[int] = sorted(set(workers)) if workers else _default_counts(need)
    rows = []
    for w in counts:
        if w < 1:
            raise ConfigurationError(f"worker counts must be >= 1, got {w}")
        n = waves(backlog, w)
        rows.append(
            PlanRow(
                workers=w,
                throughput=round(throughput(w, service_time), 9),
                net_drain=round(max(0.0, throughput(w, service_time) - arrival_rate), 9),
                drain_seconds=drain_seconds(backlog, w, service_time, arrival_rate),
                waves=n,
                wave_seconds=round(n * service_time, 9),
                memory_mib=None
                if memory_per_worker is None
                else memory_budget(w, memory_per_worker),
            )
        )
    return Plan(backlog, service_time, arrival_rate, target, need, tuple(rows))


def _default_counts(need: int) -> list[int]:
    third = max(1, math.ceil(need / 3))
    return sorted({third, 2 * third, need, max(need, 3 * third)})
