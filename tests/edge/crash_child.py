"""Child process of the crash test: enqueues and drains until it is SIGKILLed.

A line ``n id key entity`` goes to stdout (one ``os.write`` to a pipe: atomic, and kept by
the kernel when this process dies) only after ``enqueue`` has returned, so every line the
parent reads is an enqueue the caller was told had succeeded.
"""

from __future__ import annotations

import os
import random
import sys
import threading

from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue


def main() -> None:
    path, start, seed, coalesce = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rng = random.Random(seed)
    policy = RetryPolicy(base=0.001, cap=0.005, max_attempts=1_000_000)
    queue = OfflineQueue(path, QueueOptions(retry_policy=policy, coalesce=coalesce == "1"))
    lock = threading.Lock()
    counter = iter(range(start, start + 10_000_000))

    def writer(t: int) -> None:
        local = random.Random(seed * 31 + t)
        while True:
            entity = f"t{t}:{local.randrange(4)}"
            with lock:  # n order == enqueue order within an entity (one writer per entity)
                n = next(counter)
            op = queue.enqueue("update", entity, {"n": n})
            os.write(1, f"{n} {op.id} {op.idempotency_key} {entity}\n".encode())

    def drainer() -> None:
        while True:
            for op in queue.next_batch(rng.randrange(1, 20)):
                roll = rng.random()
                if roll < 0.8:
                    queue.mark_delivered(op.id)
                elif roll < 0.95:
                    queue.mark_failed(op.id, "503", kind="transient")
                else:
                    queue.release(op.id)

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(3)]
    threads.append(threading.Thread(target=drainer, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
