"""Child of the owner tests: takes operations in flight and holds them until it is killed.

``holder_child.py PATH COUNT``: opens the queue, enqueues COUNT operations on entities
``held:0`` .. ``held:COUNT-1``, takes them with ``next_batch`` and writes one line
``id key`` per operation it took, then ``ready`` (one ``os.write``: the parent never reads
half of it). Then it waits, the queue open, until stdin closes or it is killed.
"""

from __future__ import annotations

import os
import sys

from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue


def main() -> None:
    path, count = sys.argv[1], int(sys.argv[2])
    queue = OfflineQueue(path, QueueOptions(durability="normal"))
    for i in range(count):
        queue.enqueue("create", f"held:{i}", {"i": i})
    taken = queue.next_batch(count)
    lines = "".join(f"{op.id} {op.idempotency_key}\n" for op in taken)
    os.write(1, (lines + "ready\n").encode())
    sys.stdin.buffer.read()  # returns when the parent goes away: no orphan left behind


if __name__ == "__main__":
    main()
