"""tests.waiting.wait_for: returns once the condition holds, else fails naming the wait."""

from __future__ import annotations

import itertools

import pytest

from tests.waiting import wait_for


def test_it_returns_as_soon_as_the_condition_holds() -> None:
    calls = itertools.count(1)
    wait_for(lambda: next(calls) >= 3, timeout=5, interval=0)
    assert next(calls) == 4


def test_at_the_deadline_it_fails_saying_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"after 0\.05 s waiting for the sky to fall"):
        wait_for(lambda: False, timeout=0.05, what="the sky to fall", interval=0.01)
    state = {"seen": 0}
    with pytest.raises(AssertionError, match="waiting for 1, seen 0"):
        wait_for(lambda: False, 0.05, lambda: f"1, seen {state['seen']}", 0.01)
