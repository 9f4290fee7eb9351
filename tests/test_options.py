"""`QueueOptions` and `SyncOptions`: frozen, checked when made; the keyword arguments they
replace still work for one release, with a DeprecationWarning."""

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
        {"batch_size": 0},
        {"batch_size": 1.5},
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


def test_queue_keyword_arguments_are_deprecated_but_work(tmp_path: Path) -> None:
    with pytest.deprecated_call(match=r"OfflineQueue\(durability=, coalesce=\)"):
        queue = OfflineQueue(tmp_path / "q.db", durability="normal", coalesce=False)
    with queue:
        assert queue.options == QueueOptions(durability="normal", coalesce=False)
        queue.enqueue("create", "note:1", {"a": 1})
        queue.enqueue("update", "note:1", {"a": 2})
        assert len(queue.pending) == 2  # not folded: coalesce=False took effect
    with pytest.deprecated_call(), pytest.raises(ConfigurationError):
        OfflineQueue(tmp_path / "r.db", durability="off")  # type: ignore[typeddict-item]
    with pytest.raises(TypeError, match="unexpected keyword argument 'durabilty'"):
        OfflineQueue(tmp_path / "r.db", durabilty="normal")  # type: ignore[call-arg]


def test_engine_takes_its_options_and_callbacks(tmp_path: Path) -> None:
    seen: list[str] = []
    options = SyncOptions(batch_size=7, pipeline=2)
    callbacks = SyncCallbacks(on_paused=seen.append)
    with OfflineQueue(tmp_path / "q.db") as queue, warnings.catch_warnings():
        warnings.simplefilter("error")
        engine = SyncEngine(
            queue, _transport(), options, callbacks=callbacks, connectivity=ManualMonitor()
        )
        assert engine.options is options
        assert (engine.batch_size, engine.pipeline) == (7, 2)
        assert engine.callbacks.on_paused is callbacks.on_paused
        engine.close()


def test_engine_keyword_arguments_are_deprecated_but_work(tmp_path: Path) -> None:
    def on_dead(*_: object) -> None:
        pass

    with OfflineQueue(tmp_path / "q.db") as queue:
        with pytest.deprecated_call() as caught:
            engine = SyncEngine(
                queue, _transport(), connectivity=ManualMonitor(), pipeline=3, on_dead=on_dead
            )
        messages = [str(w.message) for w in caught]
        assert any("SyncEngine(pipeline=)" in m and "options=SyncOptions" in m for m in messages)
        assert any("SyncEngine(on_dead=)" in m and "callbacks=SyncCallbacks" in m for m in messages)
        assert engine.options == SyncOptions(pipeline=3)
        assert engine.callbacks.on_dead is on_dead
        engine.close()
        with pytest.deprecated_call(), pytest.raises(ConfigurationError):
            SyncEngine(queue, _transport(), batch_size=0)
        with pytest.raises(TypeError, match="unexpected keyword argument 'on_done'"):
            SyncEngine(queue, _transport(), on_done=on_dead)  # type: ignore[call-arg]


def test_cli_and_library_share_the_inspecting_options(tmp_path: Path) -> None:
    options = QueueOptions.inspecting()
    assert (options.create, options.recover, options.upgrade) == (False, False, False)
