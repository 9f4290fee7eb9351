"""``X-Pigeon-Test-Crash``: the fault switch's real crash, before or after the commit."""

from __future__ import annotations

import pytest

from pigeon.server import testhooks
from pigeon.server.testhooks import CRASH, BadTestHook, TestHooks


@pytest.mark.parametrize("point", testhooks.CRASH_POINTS)
def test_a_crash_point_is_read(point: str) -> None:
    hooks = TestHooks.parse({CRASH: point})
    assert hooks is not None and hooks.crash == point and not hooks.fail


def test_another_crash_point_is_refused_naming_the_ones_there_are() -> None:
    with pytest.raises(BadTestHook, match="before-commit, after-commit"):
        TestHooks.parse({CRASH: "sometime"})


def test_only_a_key_asked_to_die_after_its_commit_kills(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setattr(testhooks, "crash", lambda: killed.append(1))
    testhooks.crash_if_due(["k-other"])
    assert killed == []
    testhooks.crash_after_commit("k-dies")
    testhooks.crash_if_due(["k-other", "k-dies"])
    assert killed == [1]
