"""HttpTransport against a real uvicorn on loopback."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from typing import Any

import httpx
import pytest

from pigeon.core.operation import Operation
from pigeon.exceptions import ConfigurationError, PermanentError
from pigeon.protocol.http import HttpTransport
from pigeon.protocol.transport import Reply, Transport
from tests.protocol.wire_app import Fault, LiveServer, WireState, free_port

_seq = itertools.count(1)


def op(entity: str, payload: Any = None, **fields: Any) -> Operation:
    fields.setdefault("endpoint", f"/things/{entity}")
    fields.setdefault("method", "POST")
    return Operation(
        id=str(uuid.uuid4()),
        type=fields.pop("type", "create"),
        entity=entity,
        payload={"n": next(_seq)} if payload is None else payload,
        idempotency_key=str(uuid.uuid4()),
        clock=f"{next(_seq):015d}-0000000000-edge",
        **fields,
    )


def test_single_mode_sends_key_clock_quoted_if_match_and_fresh_token(
    server: LiveServer, state: WireState
) -> None:
    tokens = iter(["alice:1", "alice:2"])
    state.tokens = {"alice:1", "alice:2"}
    with HttpTransport(server.url, token=lambda: next(tokens), headers={"X-App": "t"}) as t:
        assert isinstance(t, Transport)
        first = op("a")
        second = op("a", type="update", method="PUT", base_version="1")
        exchange = t.send([first, second])
    assert [r.status for _, r in exchange.replies] == [201, 200]
    assert exchange.replies[0][1].headers["etag"] == '"1"'
    sent = state.seen_headers
    assert [h["idempotency-key"] for h in sent] == [first.idempotency_key, second.idempotency_key]
    assert [h["authorization"] for h in sent] == ["Bearer alice:1", "Bearer alice:2"]
    assert sent[0]["x-pigeon-clock"] == first.clock and sent[0]["x-app"] == "t"
    assert "if-match" not in sent[0] and sent[1]["if-match"] == '"1"'
    assert [e["body"] for e in state.effects("a")] == [first.payload, second.payload]


def test_the_same_key_goes_out_again_and_is_replayed(server: LiveServer, state: WireState) -> None:
    one = op("a")
    state.faults["a"].append(Fault(503, after_effect=True))
    with HttpTransport(server.url) as t:
        lost = t.send([one]).replies[0][1]
        again = t.send([one]).replies[0][1]
    assert lost.status == 503
    assert again.status == 201 and again.replayed
    assert state.seen_keys[one.idempotency_key] == 2
    assert len(state.effects("a")) == 1


def test_keep_going_stops_single_mode_early(server: LiveServer, state: WireState) -> None:
    state.tokens = {"good"}
    ops = [op("a"), op("b"), op("c")]
    with HttpTransport(server.url, token="bad") as t:
        exchange = t.send(ops, keep_going=lambda r: r.status not in (401, 403))
    assert [r.status for _, r in exchange.replies] == [401]
    assert exchange.attempted() == {ops[0].id}


def test_batch_mode_maps_results_and_leaves_the_tail_unattempted(
    server: LiveServer, state: WireState
) -> None:
    ops = [op("a"), op("b"), op("c"), op("d")]
    state.faults["b"].append(Fault(503, retry_after="7"))
    with HttpTransport(server.url, batch=True) as t:
        exchange = t.send(ops)
    assert state.batch_requests == 1 and state.single_requests == 0
    answered = {o.entity: r for o, r in exchange.replies}
    assert set(answered) == {"a", "b"}  # the server stopped at b's transient failure
    assert answered["a"].status == 201 and answered["a"].headers["etag"] == '"1"'
    assert answered["b"].status == 503 and answered["b"].headers["retry-after"] == "7"
    assert [e["entity"] for e in state.effects()] == ["a"]


def test_batch_splits_requests_and_stops_after_a_short_chunk(
    server: LiveServer, state: WireState
) -> None:
    ops = [op(f"e{i}") for i in range(5)]
    with HttpTransport(server.url, batch=2) as t:
        assert len(t.send(ops).replies) == 5
    assert state.batch_requests == 3
    state.faults["x0"].append(Fault(500))
    more = [op("x0"), op("x1"), op("x2"), op("x3")]
    with HttpTransport(server.url, batch=2) as t:
        exchange = t.send(more)
    # The server cut the first chunk short at x0: nothing after it is sent.
    assert [(o.entity, r.status) for o, r in exchange.replies] == [("x0", 500)]
    assert state.batch_requests == 4


def test_batch_level_failure_is_shared_by_every_operation(
    server: LiveServer, state: WireState
) -> None:
    state.tokens = {"good"}
    ops = [op("a"), op("b")]
    with HttpTransport(server.url, token="bad", batch=True) as t:
        exchange = t.send(ops)
    replies = [r for _, r in exchange.replies]
    assert len(replies) == 2 and replies[0] is replies[1]
    assert replies[0].status == 401 and replies[0].shared


def test_unreachable_server_is_a_connect_error_and_probe_says_no() -> None:
    with HttpTransport(f"http://127.0.0.1:{free_port()}") as t:
        reply = t.send([op("a")]).replies[0][1]
        assert isinstance(reply.error, httpx.ConnectError)
        assert t.probe() is False


@pytest.mark.parametrize("status", [404, 500, 502, 503, 504])
def test_probe_says_yes_to_any_http_answer(
    server: LiveServer, state: WireState, status: int
) -> None:
    # The network path works; what a 5xx means for an operation is for classify to say.
    state.health_status = status
    with HttpTransport(server.url) as t:
        assert t.probe() is True


def test_probe_and_read_timeout(server: LiveServer, state: WireState) -> None:
    timeout = httpx.Timeout(5.0, read=0.2)
    with HttpTransport(server.url, timeout=timeout) as t:
        assert t.probe() is True
        state.delay = 1.0
        started = time.monotonic()
        reply = t.send([op("a")]).replies[0][1]
    assert isinstance(reply.error, httpx.ReadTimeout)
    assert time.monotonic() - started < 0.9


def test_operation_without_endpoint_is_a_permanent_error_not_a_request(
    server: LiveServer, state: WireState
) -> None:
    with HttpTransport(server.url) as t:
        reply = t.send([op("a", endpoint=None)]).replies[0][1]
    assert isinstance(reply.error, PermanentError) and "no endpoint" in str(reply.error)
    assert state.single_requests == 0


def test_default_method_by_type_and_custom_route(server: LiveServer, state: WireState) -> None:
    with HttpTransport(server.url) as t:
        t.send([op("a", method=None, type="create"), op("b", method=None, type="delete")])
    with HttpTransport(server.url, route=lambda o: ("PATCH", f"/things/{o.entity}")) as t:
        t.send([op("c", endpoint=None)])
    assert [e["method"] for e in state.effects()] == ["POST", "DELETE", "PATCH"]


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="batch"):
        HttpTransport("http://x", batch=0)
    with pytest.raises(ConfigurationError, match="base_url"):
        HttpTransport()


def test_malformed_batch_reply_is_an_unknown_outcome() -> None:
    from pigeon.protocol.inprocess import InProcessTransport

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"oops": True})

    with InProcessTransport(handler=handler, batch=True) as t:
        replies = [r for _, r in t.send([op("a"), op("b")]).replies]
    assert len(replies) == 2 and all(isinstance(r, Reply) and r.error for r in replies)
    assert "results" in str(replies[0].error)


@pytest.mark.parametrize("status", [400, 404, 405, 410, 422])
def test_a_refused_batch_request_is_batch_refused_not_a_verdict_on_each_op(
    status: int,
) -> None:
    """A 404 from a server without the batch route says nothing about the operations
    inside: none was applied, and the queue must pause, not run them into dead letters."""
    from pigeon.exceptions import BatchRefused
    from pigeon.sync.classify import ReplyKind, classify

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"title": "refused"})

    client = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    with HttpTransport(client=client, batch=True) as t:
        replies = t.send([op("a"), op("b")]).replies
    assert len(replies) == 2
    for _, reply in replies:
        assert isinstance(reply.error, BatchRefused) and reply.shared
        outcome = classify(reply.status, reply.headers, reply.body, reply.error, now=time.time())
        assert outcome.kind is ReplyKind.REFUSED and outcome.status == status
        assert f"HTTP {status}" in outcome.reason


def _batch_server(limit: int, sizes: list[int]) -> httpx.Client:
    """A server behind a proxy that refuses batch requests of more than ``limit``
    operations with 413; the rest are applied, each answered 200."""

    def handler(request: httpx.Request) -> httpx.Response:
        operations = json.loads(request.content)["operations"]
        sizes.append(len(operations))
        if len(operations) > limit:
            return httpx.Response(413, text="request entity too large")
        results = [{"id": o["id"], "status": 200, "body": o["body"]} for o in operations]
        return httpx.Response(200, json={"results": results})

    return httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))


def test_a_batch_refused_as_too_large_is_split_until_it_passes() -> None:
    sizes: list[int] = []
    ops = [op(f"e{i}") for i in range(5)]
    with HttpTransport(client=_batch_server(2, sizes), batch=True) as t:
        replies = t.send(ops).replies
    assert [o.id for o, _ in replies] == [o.id for o in ops]  # every one, in order
    assert all(r.status == 200 for _, r in replies)
    assert sizes == [5, 2, 3, 1, 2]  # halves, one after the other


def test_an_operation_too_large_alone_is_permanent_and_the_split_stops_there() -> None:
    from pigeon.sync.classify import ReplyKind, classify

    sizes: list[int] = []
    ops = [op(f"e{i}") for i in range(3)]
    with HttpTransport(client=_batch_server(0, sizes), batch=True) as t:
        replies = t.send(ops, keep_going=lambda reply: reply.error is None).replies
    # 3 -> [1] alone is refused: a verdict on that operation; the rest are not attempted.
    assert sizes == [3, 1] and [o.id for o, _ in replies] == [ops[0].id]
    reply = replies[0][1]
    assert isinstance(reply.error, PermanentError) and not reply.shared
    assert classify(None, error=reply.error, now=time.time()).kind is ReplyKind.PERMANENT


def test_batches_never_exceed_the_servers_limit() -> None:
    from pigeon.core.wire import MAX_BATCH

    sizes: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        ops = json.loads(request.content)["operations"]
        sizes.append(len(ops))
        results = [{"id": o["id"], "status": 201, "body": {}, "replayed": False} for o in ops]
        return httpx.Response(200, json={"results": results})

    client = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    with HttpTransport(client=client, batch=True) as t:
        t.send([op(f"e{i}") for i in range(MAX_BATCH + 5)])
    assert sizes == [MAX_BATCH, 5]


def test_concurrency_keeps_several_requests_on_the_wire_and_answers_in_order(
    server: LiveServer, state: WireState
) -> None:
    state.delay = 0.3  # every request waits this long on the server
    ops = [op(f"w{i}") for i in range(8)]
    with HttpTransport(server.url, concurrency=4) as t:
        started = time.perf_counter()
        exchange = t.send(ops)
        elapsed = time.perf_counter() - started
    # Eight requests of 0.3 s each, four at a time: two rounds (2.4 s one by one).
    assert elapsed < 1.5, elapsed
    assert [o.entity for o, _ in exchange.replies] == [o.entity for o in ops]
    assert all(r.status == 201 for _, r in exchange.replies)
    assert sorted(e["entity"] for e in state.effects()) == sorted(o.entity for o in ops)


def test_concurrency_stops_starting_requests_after_a_stop_but_keeps_what_was_sent(
    server: LiveServer, state: WireState
) -> None:
    state.tokens = {"good"}
    ops = [op(f"s{i}") for i in range(7)]
    with HttpTransport(server.url, token="bad", concurrency=3) as t:
        exchange = t.send(ops, keep_going=lambda r: r.status not in (401, 403))
    # The first three went out together; the 401 of the first stops the rest.
    assert [o.entity for o, _ in exchange.replies] == ["s0", "s1", "s2"]
    assert all(r.status == 401 for _, r in exchange.replies)
    assert state.single_requests == 3


def test_concurrency_sends_batch_chunks_side_by_side(server: LiveServer, state: WireState) -> None:
    state.delay = 0.3
    ops = [op(f"c{i}") for i in range(6)]
    with HttpTransport(server.url, batch=2, concurrency=3) as t:
        started = time.perf_counter()
        exchange = t.send(ops)
        elapsed = time.perf_counter() - started
    assert elapsed < 0.8, elapsed  # three chunks of 0.3 s at once, not 0.9 s in a row
    assert state.batch_requests == 3
    assert [o.entity for o, _ in exchange.replies] == [o.entity for o in ops]


@pytest.mark.parametrize("bad", [0, -1, 65, True, 1.5])
def test_bad_concurrency_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="concurrency"):
        HttpTransport("http://x", concurrency=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("batch", [False, True])
def test_a_token_callable_that_raises_is_not_sent_never_an_exception(
    batch: bool, server: LiveServer, state: WireState
) -> None:
    """The token callable is application code: whatever it raises, nothing went out, and
    the exception must not escape into the engine's loop."""
    from pigeon.exceptions import NotSent
    from pigeon.sync.classify import ReplyKind, classify

    def token() -> str:
        raise KeyError("no session")

    with HttpTransport(server.url, token=token, batch=batch) as t:
        exchange = t.send([op("a"), op("b")], keep_going=lambda reply: reply.error is None)
    replies = exchange.replies
    assert state.single_requests == state.batch_requests == 0
    assert replies and all(isinstance(r.error, NotSent) for _, r in replies)
    assert isinstance(replies[0][1].error.__cause__, KeyError)
    outcome = classify(None, error=replies[0][1].error, now=time.time())
    assert outcome.kind is ReplyKind.TRANSIENT and not outcome.sent


@pytest.mark.parametrize("batch", [False, True, 10])
def test_sending_nothing_is_an_empty_exchange_and_no_request(batch: bool | int) -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"results": []})

    client = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    with HttpTransport(client=client, batch=batch) as t:
        exchange = t.send([])
    assert exchange.replies == [] and requests == []


def test_a_proxy_that_refuses_the_tunnel_is_not_sent_and_costs_no_attempt() -> None:
    # An https server through a forward proxy that answers CONNECT with 403 (a captive
    # portal, a corporate proxy's policy): the request never left the proxy, the server
    # cannot have seen it. Read as an attempt, each pass spent one per operation and
    # marked them sent (never folded, never cancelled) while the network was not there.
    import socket

    from pigeon.sync.classify import classify

    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(4)

    def refuse() -> None:
        conn, _ = proxy.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=refuse, daemon=True).start()
    port = proxy.getsockname()[1]
    client = httpx.Client(base_url="https://pigeon.invalid", proxy=f"http://127.0.0.1:{port}")
    with HttpTransport(client=client) as t:
        reply = t.send([op("a")]).replies[0][1]
    client.close()
    proxy.close()
    assert isinstance(reply.error, httpx.ProxyError)
    outcome = classify(None, error=reply.error, now=time.time())
    assert outcome.sent is False


def test_headers_given_in_another_case_are_replaced_not_sent_twice(
    server: LiveServer, state: WireState
) -> None:
    # HTTP names are case-insensitive: an app's own "authorization" beside the token, or
    # an "idempotency-key" of its own, went out as a second line (and a server following
    # the Idempotency-Key draft refuses two key lines with 400).
    state.tokens = {"alice:1"}
    one = op("a")
    given = {"authorization": "Bearer stale", "idempotency-key": "not-this", "X-App": "t"}
    with HttpTransport(server.url, token="alice:1", headers=given) as t:
        assert t.send([one]).replies[0][1].status == 201
    [raw] = state.seen_raw_headers
    lines = [(name.lower(), value) for name, value in raw]
    assert [v for n, v in lines if n == "authorization"] == ["Bearer alice:1"]
    assert [v for n, v in lines if n == "idempotency-key"] == [one.idempotency_key]
    assert [v for n, v in lines if n == "x-app"] == ["t"]
