"""`QueueOptions` and `SyncOptions`: frozen, checked when made; the only way to give the
queue's and the engine's settings."""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import pytest

from pigeon import (
    ConfigurationError,
    HttpTransport,
    ManualMonitor,
    OfflineQueue,
    QueueOptions,
    RetryPolicy,
    SyncCallbacks,
    SyncEngine,
    SyncOptions,
)


def _transport() -> HttpTransport:
    return HttpTransport("http://127.0.0.1:9")  # never called here


@pytest.mark.parametrize(
    "bad",
    [
        {"durability": "off"},
        {"max_payload_bytes": 0},
        {"max_payload_bytes": True},
        {"allowed_types": []},
        {"allowed_types": [""]},
        {"keep_delivered": -1},
        {"keep_delivered": math.nan},
        {"recover_every": -1},
        {"retry_policy": "fast"},
    ],
)
def test_queue_options_refuse_bad_values_when_made(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        QueueOptions(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        {"pipeline": 0},
        {"pipeline": 17},
        {"pipeline": True},
        {"cycle_size": 0},
        {"cycle_size": 1.5},
        {"idle_recheck": 0},
        {"idle_recheck": math.inf},
        {"batch_window": -0.1},
        {"reconnect": 3},
    ],
)
def test_sync_options_refuse_bad_values_when_made(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        SyncOptions(**bad)  # type: ignore[arg-type]


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        QueueOptions().coalesce = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        SyncOptions().pipeline = 2  # type: ignore[misc]


def test_queue_takes_its_options(tmp_path: Path) -> None:
    policy = RetryPolicy(base=1.0, max_attempts=3)
    options = QueueOptions(
        retry_policy=policy, durability="normal", allowed_types={"create"}, keep_delivered=None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new form warns of nothing
        with OfflineQueue(tmp_path / "q.db", options) as queue:
            assert queue.options is options
            assert queue.retry_policy is policy
            assert queue.durability == "normal"
            assert queue.allowed_types == frozenset({"create"})
            assert queue.keep_delivered is None


def test_the_settings_are_no_keyword_arguments(tmp_path: Path) -> None:
    """One way to say each setting: the keyword arguments the options objects replaced
    are gone (never released), and refusing one writes nothing."""
    with pytest.raises(TypeError, match="durability"):
        OfflineQueue(tmp_path / "q.db", durability="normal")  # type: ignore[call-arg]
    assert not (tmp_path / "q.db").exists()
    with OfflineQueue(tmp_path / "q.db") as queue:
        with pytest.raises(TypeError, match="pipeline"):
            SyncEngine(queue, _transport(), pipeline=2)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="on_dead"):
            SyncEngine(queue, _transport(), on_dead=print)  # type: ignore[call-arg]


def test_engine_takes_its_options_and_callbacks(tmp_path: Path) -> None:
    seen: list[str] = []
    options = SyncOptions(cycle_size=7, pipeline=2)
    callbacks = SyncCallbacks(on_paused=seen.append)
    with OfflineQueue(tmp_path / "q.db") as queue, warnings.catch_warnings():
        warnings.simplefilter("error")
        engine = SyncEngine(
            queue, _transport(), options, callbacks=callbacks, connectivity=ManualMonitor()
        )
        assert engine.options is options
        assert (engine.cycle_size, engine.pipeline) == (7, 2)
        assert engine.callbacks.on_paused is callbacks.on_paused
        engine.close()


def test_cli_and_library_share_the_inspecting_options(tmp_path: Path) -> None:
    options = QueueOptions.inspecting()
    assert (options.create, options.recover, options.upgrade) == (False, False, False)
