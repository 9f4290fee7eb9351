"""Full-jitter exponential backoff for job retries: the edge's `RetryPolicy` maths (factor
2), with the jobs' defaults and attempt limits kept elsewhere (`App.queue`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pigeon.core.retry import RetryPolicy
from pigeon.exceptions import ConfigurationError


@dataclass(frozen=True)
class Backoff:
    """``delay(n) = uniform(0, min(cap, base * 2**(n-1)))`` for the n-th failed attempt."""

    base: float = 2.0
    cap: float = 300.0
    _policy: RetryPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (self.base > 0 and self.cap >= self.base):
            raise ConfigurationError(
                f"backoff needs 0 < base <= cap, got base={self.base!r} cap={self.cap!r}"
            )
        object.__setattr__(self, "_policy", RetryPolicy(base=self.base, factor=2.0, cap=self.cap))

    def ceiling(self, attempts: int) -> float:
        return self._policy.backoff(_checked(attempts))

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        return self._policy.delay(_checked(attempts), rng=rng)


def _checked(attempts: int) -> int:
    if attempts < 1:
        raise ConfigurationError(f"attempts must be >= 1, got {attempts}")
    return attempts
