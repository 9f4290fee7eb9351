"""RetryPolicy: bounds of backoff and full jitter, Retry-After, exhaustion, validation."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.core.retry import RetryPolicy
from pigeon.exceptions import ConfigurationError

policies = st.builds(
    RetryPolicy,
    base=st.floats(0.01, 60),
    factor=st.floats(1, 10),
    cap=st.floats(60, 7200),
    max_attempts=st.integers(1, 50),
    max_age=st.none() | st.floats(1, 1e6),
)


def test_defaults_are_the_documented_schedule() -> None:
    policy = RetryPolicy()
    assert [policy.backoff(n) for n in range(1, 12)] == [
        2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600,
    ]  # fmt: skip
    assert policy.max_attempts == 8 and policy.max_age is None


@given(policies, st.integers(0, 10_000))
def test_backoff_never_exceeds_cap_and_never_shrinks(policy: RetryPolicy, n: int) -> None:
    assert 0 <= policy.backoff(n) <= policy.cap
    assert policy.backoff(n + 1) >= policy.backoff(n)
    if n >= 1:
        assert policy.backoff(n) >= min(policy.base, policy.cap)


@given(policies, st.integers(1, 200), st.integers(0, 2**32))
def test_full_jitter_stays_within_zero_and_backoff(policy: RetryPolicy, n: int, seed: int) -> None:
    delay = policy.delay(n, rng=random.Random(seed))
    assert 0 <= delay <= policy.backoff(n)


def test_jitter_spreads_over_the_whole_interval() -> None:
    policy = RetryPolicy()
    rng = random.Random(7)
    delays = [policy.delay(3, rng=rng) for _ in range(2000)]
    # full jitter, not "backoff plus a little": both halves of [0, 8] are used
    assert min(delays) < 1 and max(delays) > 7
    assert 3.5 < sum(delays) / len(delays) < 4.5


@given(policies, st.integers(1, 50), st.floats(-100, 1e5))
def test_retry_after_is_honoured_exactly_but_never_negative(
    policy: RetryPolicy, n: int, retry_after: float
) -> None:
    assert policy.delay(n, retry_after=retry_after) == max(retry_after, 0.0)


@given(policies, st.integers(1, 200), st.floats(1e-9, 1e5), st.integers(0, 2**32))
def test_a_positive_retry_after_overrides_the_backoff(
    policy: RetryPolicy, n: int, retry_after: float, seed: int
) -> None:
    # Sooner or later than our own schedule: the server's wait is the wait.
    assert policy.honour(n, retry_after, rng=random.Random(seed)) == retry_after


@given(policies, st.integers(1, 200), st.integers(0, 2**32))
def test_honour_of_retry_after_zero_is_the_plain_schedule(
    policy: RetryPolicy, n: int, seed: int
) -> None:
    # "Retry-After: 0" to every try must not spend the attempts back to back.
    for zero in (0.0, -0.0, -5.0, float("nan")):
        assert policy.honour(n, zero, rng=random.Random(seed)) == policy.delay(
            n, rng=random.Random(seed)
        )


@given(policies, st.integers(0, 100), st.floats(0, 1e7))
def test_exhausted_by_attempts_or_age(policy: RetryPolicy, n: int, age: float) -> None:
    expected = n >= policy.max_attempts or (policy.max_age is not None and age >= policy.max_age)
    assert policy.exhausted(n, age) is expected


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"base": 0}, "base"),
        ({"base": float("nan")}, "base"),
        ({"factor": 0.5}, "factor"),
        ({"cap": 1, "base": 2}, "cap"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_age": -1}, "max_age"),
        ({"cap": float("inf")}, "cap"),
    ],
)
def test_bad_values_are_refused_by_name(kwargs: dict[str, float], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
