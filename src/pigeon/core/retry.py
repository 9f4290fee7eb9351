"""When to try an operation again, and when to give up. Pure values, no I/O.

Exponential backoff with *full jitter* (AWS architecture blog, "Exponential Backoff And
Jitter"): after the n-th failure the ceiling is ``min(cap, base * factor ** (n - 1))`` and
the actual wait is drawn uniformly from ``[0, ceiling]``, so a crowd of clients that lost the
network together does not come back together. A server's ``Retry-After`` overrides that
wait (`RetryPolicy.honour`), except ``Retry-After: 0``, which names no wait at all.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pigeon.checks import is_finite, is_int_in
from pigeon.exceptions import ConfigurationError

_DEFAULT_RNG = random.Random()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff ``base``, ``base*factor``, ... seconds up to ``cap``; give up after
    ``max_attempts`` failures or, if set, once the operation is ``max_age`` seconds old."""

    base: float = 2.0
    factor: float = 2.0
    cap: float = 600.0
    max_attempts: int = 8
    max_age: float | None = None

    def __post_init__(self) -> None:
        # max_age may be None (no age limit); every number given must be finite: NaN
        # compares false with everything and would pass every bound below.
        numbers = {"base": self.base, "factor": self.factor, "cap": self.cap}
        if self.max_age is not None:
            numbers["max_age"] = self.max_age
        for name, value in numbers.items():
            if not is_finite(value):
                raise ConfigurationError(
                    f"RetryPolicy.{name} must be a finite number, not {value!r}"
                )
        if self.base <= 0:
            raise ConfigurationError(f"RetryPolicy.base must be > 0 seconds, not {self.base!r}")
        if self.factor < 1:
            raise ConfigurationError(f"RetryPolicy.factor must be >= 1, not {self.factor!r}")
        if self.cap < self.base:
            raise ConfigurationError(
                f"RetryPolicy.cap ({self.cap!r}) must be >= base ({self.base!r})"
            )
        if not is_int_in(self.max_attempts, 1):
            raise ConfigurationError(
                f"RetryPolicy.max_attempts must be an integer >= 1, not {self.max_attempts!r}"
            )
        if self.max_age is not None and self.max_age <= 0:
            raise ConfigurationError(
                f"RetryPolicy.max_age must be > 0 seconds or None, not {self.max_age!r}"
            )

    def backoff(self, attempts: int) -> float:
        """The un-jittered ceiling after ``attempts`` failures (0 failures: no wait)."""
        if attempts <= 0:
            return 0.0
        # Compare exponents, not powers: factor ** 10_000 overflows a float.
        if self.factor > 1 and (attempts - 1) * math.log(self.factor) >= math.log(
            self.cap / self.base
        ):
            return self.cap
        return min(self.cap, self.base * self.factor ** (attempts - 1))

    def delay(
        self,
        attempts: int,
        *,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait before the next try: ``retry_after`` exactly if given (never
        negative; a moment chosen on purpose, e.g. the one a whole failed batch retries
        at; a server's header goes through `honour` first), otherwise full jitter in
        ``[0, backoff]``."""
        if retry_after is not None and is_finite(retry_after):
            return max(float(retry_after), 0.0)
        return (rng or _DEFAULT_RNG).uniform(0.0, self.backoff(attempts))

    def honour(
        self, attempts: int, retry_after: float, *, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait after the ``attempts``-th failure when the server named
        ``retry_after``: exactly that when it is a positive wait (the server knows best;
        it overrides the backoff, as docs/design.md's retry rule says), otherwise this
        policy's own jittered draw.

        ``Retry-After: 0`` (or a date already past) names no wait. Taken literally, a
        server or a rate limiter that rounds "0.4 s" down, answering 0 to every try, had
        an operation's attempts spent back to back and dead-lettered within
        milliseconds, and a 409 "key in progress" (no attempt spent) resent in a tight
        loop; a crowd of clients told 0 came back all at once. So 0 is read as no
        header: the usual full-jitter schedule."""
        if is_finite(retry_after) and retry_after > 0:
            return float(retry_after)
        return self.delay(attempts, rng=rng)

    def exhausted(self, attempts: int, age: float) -> bool:
        """True once ``attempts`` failures or an ``age`` (seconds) mean: dead-letter it."""
        if attempts >= self.max_attempts:
            return True
        return self.max_age is not None and age >= self.max_age
