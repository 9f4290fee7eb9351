"""One asyncio loop on a daemon thread: the synchronous relay drives the asyncio broker
clients (nats-py, aio-pika) through it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def run_batch(
        self, coro: Coroutine[Any, Any, T], timeout: float, drop: Callable[[], None]
    ) -> T:
        """``run`` one publish of a batch: on any failure the connection is dropped first
        (the next batch connects anew), and a failure that does not say how much the
        broker confirmed becomes a ``PartialPublish`` that confirmed nothing."""
        from pigeon.jobs.publishers.messages import PartialPublish

        try:
            return self.run(coro, timeout)
        except PartialPublish:
            drop()
            raise
        except Exception as exc:
            drop()
            raise PartialPublish(0, exc) from exc

    def close(self) -> None:
        if self.loop.is_closed():
            return
        # A client's tasks still pending (a close it started on a lost connection) end
        # here, cancelled and awaited, rather than as coroutines never awaited.
        with contextlib.suppress(Exception):
            self.run(self._cancel_pending(), 5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()

    async def _cancel_pending(self) -> None:
        current = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_asyncgens()
