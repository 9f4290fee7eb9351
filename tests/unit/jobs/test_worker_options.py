"""``WorkerOptions``: one frozen, validated value for the library, the supervisor and the
CLI; ``Worker``'s old keyword arguments still work, with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pigeon import jobs
from pigeon.exceptions import ConfigurationError
from pigeon.jobs import supervisor
from pigeon.jobs.app import App
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.stores.memory import MemoryJobStore
from pigeon.jobs.worker import Worker


def test_one_options_type_everywhere() -> None:
    assert jobs.WorkerOptions is WorkerOptions is supervisor.WorkerOptions


def test_defaults_are_the_workers_old_defaults_and_the_value_is_frozen() -> None:
    options = WorkerOptions()
    assert (options.poll, options.poll_max, options.batch, options.durability) == (
        0.05,
        0.5,
        None,
        "full",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.poll = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad",
    [
        {"batch": 0},
        {"batch": True},
        {"recycle_jobs": 0},
        {"recycle_mib": 0},
        {"recycle_mib": math.nan},
        {"poll": 0},
        {"poll": math.inf},
        {"poll": 1.0, "poll_max": 0.5},  # order: poll <= poll_max
        {"keepalive": -1},
        {"control_every": 0},
        {"purge_every": math.nan},
        {"schedules": 1},
        {"durability": "sometimes"},
        {"log_format": "xml"},
        {"log_redact": ["token"]},
    ],
)
def test_bad_values_are_refused_when_made(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        WorkerOptions(**bad)  # type: ignore[arg-type]


def _app() -> App:
    app = App()
    app.queue("q")
    return app


def test_a_worker_takes_its_options() -> None:
    options = WorkerOptions(batch=7, poll=0.01, poll_max=0.02, schedules=False)
    worker = Worker(_app(), MemoryJobStore(), {"q": 1}, options)
    assert worker.options is options
    assert (worker.batch, worker.poll, worker.poll_max, worker.schedules) == (7, 0.01, 0.02, False)


def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="nonsense"):
        Worker(_app(), MemoryJobStore(), {"q": 1}, nonsense=1)  # type: ignore[call-arg]
