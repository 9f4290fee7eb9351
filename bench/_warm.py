"""The one warm-up every contender gets before its clock starts, pigeon and baseline alike:
whatever a first use costs once (connections, lazy imports, compiled statements, caches)
is paid untimed on both sides, never on one side only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# Requests of the measured kind sent over the measured connections before the clock,
# to each server a benchmark times (spread over its connections when it has several).
WARM_REQUESTS = 20


class Stepper(Protocol):
    def step(self, k: int) -> float:
        """Do ``k`` units of work; the seconds they took."""
        ...


def warm_share(streams: int) -> int:
    """Warm-up requests per connection when a server is driven over ``streams`` of them."""
    return -(-WARM_REQUESTS // streams)


def interleaved(contenders: Sequence[Stepper], sizes: Sequence[int], rounds: int) -> list[float]:
    """Seconds each contender spent over ``rounds`` rounds of one ``step`` each in turn,
    after one round of the same steps that is not counted (the warm-up)."""
    spent = [0.0] * len(contenders)
    for r in range(rounds + 1):
        for index, (contender, k) in enumerate(zip(contenders, sizes, strict=True)):
            took = contender.step(k)
            if r:
                spent[index] += took
    return spent


def turn_order(count: int, round_: int) -> Sequence[int]:
    """The order of ``count`` contenders taking turns in round ``round_``, reversed every
    other round: neither goes first, nor right after a spell the other ended, every time."""
    order = range(count)
    return order if round_ % 2 == 0 else order[::-1]
