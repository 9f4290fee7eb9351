"""Which batches, and groups of single requests, a single-writer server applies on its
event loop instead of its writer thread.

With one writer (SQLite) the batches and groups take turns on a thread of their own
(`pigeon.server.grouping`), so that none holds up the event loop, which reads every other
request and answers the health probe. The hand-off costs more than the hop, though:
while the writer works, the loop wakes for each request that arrives and the two threads
pass the interpreter's lock to and fro. A served batch of 100 creates cost 8-39% more CPU
(12% in the median of six alternated runs) on the writer thread than applied on the loop,
the server alone fed batches on two connections; single requests on eight connections
went 12-14% faster on the loop. So a batch or group that is sure to be short runs where it
was read, when nothing else is writing:

- its bodies are small and its operations few (``MAX_BYTES``, ``MAX_OPS``): decoding
  them and the store's own work are bounded by them;
- each of its routes has run before, and their recent mean durations (the handler's and
  the route's declared checks') add up to no more than ``MAX_SECONDS``: an application's
  slow handler or validator keeps going to the writer thread;
- the writer thread has nothing to do, and the store's write turn is free at once
  (``IdempotencyStore.turn_at_once``): the loop never waits for another thread's or
  process's transaction.

Only the commit runs there: what follows it before the answer (``Intake.finish``) runs the
application's after-commit and replay hooks, which no duration above knows of, on the
writer thread, the turn let go of first (`pigeon.server.grouping.finish_after_loop`).
"""

from __future__ import annotations

MAX_BYTES = 64 << 10  # a batch of 100 creates from the edge is ~30 KiB
MAX_OPS = 128
# The handlers' expected time, all operations together (a set handler's includes its
# claims and stored answers): a fifth of the 100 ms a health probe may wait, at most.
MAX_SECONDS = 0.020


def small(size: int) -> bool:
    """Is a body of ``size`` bytes small enough to be decoded on the loop?"""
    return size <= MAX_BYTES


def short(ops: int, expected: float | None) -> bool:
    """Is a batch of ``ops`` operations whose handlers are ``expected`` to take that many
    seconds (None: a route of it never ran) sure to be short?"""
    return ops <= MAX_OPS and expected is not None and expected <= MAX_SECONDS
