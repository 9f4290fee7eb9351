"""The relay's loop thread ends with nothing of its clients left pending."""

from __future__ import annotations

import asyncio

from pigeon.jobs.publishers._loop import LoopThread


def test_close_cancels_and_awaits_what_a_client_left_pending() -> None:
    thread = LoopThread("test-loop")
    ended: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("forever")

    async def start_in_background() -> asyncio.Task[None]:
        return asyncio.ensure_future(forever())  # as a client's callback would, unawaited

    task = thread.run(start_in_background(), 5)
    thread.close()
    assert task.cancelled() and ended == ["forever"]
    assert thread.loop.is_closed()
