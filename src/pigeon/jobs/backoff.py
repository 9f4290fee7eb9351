"""Full-jitter exponential backoff for job retries. Pure: the caller supplies the randomness.

The edge's ``RetryPolicy`` had not landed when this was written; if it grows the same
maths, this module should delegate to it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pigeon.exceptions import ConfigurationError


@dataclass(frozen=True)
class Backoff:
    """``delay(n) = uniform(0, min(cap, base * 2**(n-1)))`` for the n-th failed attempt."""

    base: float = 2.0
    cap: float = 300.0

    def __post_init__(self) -> None:
        if not (self.base > 0 and self.cap >= self.base):
            raise ConfigurationError(
                f"backoff needs 0 < base <= cap, got base={self.base!r} cap={self.cap!r}"
            )

    def ceiling(self, attempts: int) -> float:
        if attempts < 1:
            raise ConfigurationError(f"attempts must be >= 1, got {attempts}")
        # Cap the exponent first: 2**10000 would overflow a float.
        return min(self.cap, self.base * 2.0 ** min(attempts - 1, 64))

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        return (rng or random).uniform(0.0, self.ceiling(attempts))
