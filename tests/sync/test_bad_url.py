"""A request URL that cannot be used pauses the queue; it never dead-letters operations.

Real OfflineQueue file, real uvicorn on loopback, real httpx."""

from __future__ import annotations

import httpx

from pigeon.core.operation import OpStatus
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.sync.classify import ReplyKind, classify
from tests.protocol.wire_app import LiveServer, WireState
from tests.sync.conftest import MakeEngine


def test_url_errors_pause_and_spend_nothing() -> None:
    request = httpx.Request("POST", "http://x/notes")
    for error in (
        httpx.UnsupportedProtocol("Request URL is missing an 'http://' or 'https://' protocol."),
        httpx.InvalidURL("Invalid non-printable ASCII character in URL"),
    ):
        outcome = classify(None, error=error, now=0.0)
        assert outcome.kind is ReplyKind.REFUSED and not outcome.sent
        assert "base URL" in outcome.reason and type(error).__name__ in outcome.reason
    malformed = httpx.LocalProtocolError("bad header", request=request)
    assert classify(None, error=malformed, now=0.0).kind is ReplyKind.PERMANENT


def test_a_client_without_a_base_url_pauses_the_queue_until_fixed(
    make_engine: MakeEngine, queue: OfflineQueue, server: LiveServer, state: WireState
) -> None:
    paused: list[str] = []
    with httpx.Client() as bare:
        for batch in (False, True):
            engine = make_engine(HttpTransport(client=bare, batch=batch), on_paused=paused.append)
            ops = [engine.enqueue("update", f"thing:{e}", {"e": e}) for e in ("a", "b", "c")]
            assert engine.flush(timeout=5) is False
            assert engine.paused and "UnsupportedProtocol" in engine.paused
            assert "base URL" in engine.paused and paused[-1] == engine.paused
            assert queue.stats().paused == engine.paused  # what `pigeon queue stats` shows
            assert queue.dead_letters() == [] and engine.totals.dead == 0
            for made in ops:
                stored = queue.get(made.id)
                assert stored.status is OpStatus.PENDING and stored.attempts == 0
            engine.close()
            # Fixed: a transport with the server's URL, then resume.
            fixed = make_engine(HttpTransport(server.url, batch=batch))
            fixed.resume()
            assert fixed.flush(timeout=5) and fixed.paused is None
            assert all(queue.get(made.id).status is OpStatus.DELIVERED for made in ops)
            fixed.close()
    assert [len(state.effects(e)) for e in ("a", "b", "c")] == [2, 2, 2]


def test_one_operation_with_a_bad_endpoint_is_dead_and_pauses_nothing(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    engine = make_engine()
    bad = engine.enqueue("update", "thing:a", {"x": 1}, endpoint="ftp://elsewhere/things/a")
    good = engine.enqueue("update", "thing:b", {"x": 1})
    assert engine.flush(timeout=5) and engine.paused is None
    assert queue.get(bad.id).status is OpStatus.DEAD
    assert "ftp://elsewhere/things/a" in (queue.get(bad.id).last_error or "")
    assert queue.get(good.id).status is OpStatus.DELIVERED and len(state.effects("b")) == 1
