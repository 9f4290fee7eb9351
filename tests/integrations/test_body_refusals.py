"""Every write route refuses a body it will not take alike, before anything runs: ``pigeon
serve``'s, the FastAPI integration's and the Django integration's, one operation or a
batch. A declared type that is not JSON is a 415 before the size is looked at, a body
over the route's limit a 413 (which the edge answers by splitting a batch), and a body
sent with no type a 415: each from the request's head, before a byte of the body is
read, and after one operation's key; a body sent without a length is a 413 once it has
passed the limit; a body that is no JSON is the intake's 400. The FastAPI
batch route and both Django views looked at the size first, and answered a large
text/plain body 413 where ``pigeon serve`` said 415; FastAPI's ``@idempotent`` routes and
Django's ASGI handler read every body whole before pigeon's limit was checked.

Real servers on loopback; the requests go over a raw socket, since a head whose body is
never sent is what a route that answers from the head must answer at once."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from pigeon.core.wire import BATCH_PATH, PROBLEM_PREFIX
from tests.integrations.django_notes import DjangoNotes
from tests.integrations.served_apps import fastapi_orders, pigeon_serve
from tests.rawhttp import read_response

PATHS = ("/notes", BATCH_PATH)  # one operation, a batch
OVER = 10 << 30  # bytes announced, over every route's limit, none sent
SMALL = b'{"operations": []}'


@contextmanager
def _django(tmp_path: Path) -> Iterator[str]:
    server = DjangoNotes(str(tmp_path / "django.db")).start()
    try:
        yield server.url
    finally:
        server.stop()


APPS: dict[str, Callable[[Path], AbstractContextManager[str]]] = {
    "pigeon serve": pigeon_serve,
    "fastapi": fastapi_orders,
    "django": _django,
}


@pytest.fixture(params=sorted(APPS), scope="module")
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with APPS[request.param](tmp_path_factory.mktemp("app")) as found:
        yield found


def exchange(
    url: str, path: str, media: str | None, size: int, body: bytes | None, key: bool = True
) -> str:
    """The answer to a POST of ``size`` bytes declared as ``media``: ``body`` sent, or
    nothing after the head; ``key``: with an Idempotency-Key."""
    port = int(url.rsplit(":", 1)[1])
    typed = "" if media is None else f"Content-Type: {media}\r\n"
    keyed = f"Idempotency-Key: k-{size}\r\n" if key else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ada.1\r\n{keyed}"
        f"Connection: close\r\n{typed}Content-Length: {size}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head.encode())
        if body is not None:
            conn.sendall(body)
        return read_response(conn)


def streamed(url: str, path: str, size: int) -> str:
    """The answer to a POST of ``size`` bytes of JSON sent in chunks, with no length
    announced: a limit is then counted as the body arrives. The chunks go from a thread,
    which stops quietly if the server closes the connection."""
    port = int(url.rsplit(":", 1)[1])
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ada.1\r\n"
        "Idempotency-Key: chunked\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"

    def send() -> None:
        with contextlib.suppress(OSError):
            for _ in range(size // 0x10000):
                conn.sendall(chunk)
            conn.sendall(b"0\r\n\r\n")

    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head.encode())
        sender = threading.Thread(target=send)
        sender.start()
        try:
            return read_response(conn)
        finally:
            sender.join(30)


def refused(answer: str, status: int, slug: str) -> bool:
    return answer.startswith(f"HTTP/1.1 {status} ") and f'"{PROBLEM_PREFIX}{slug}"' in answer


@pytest.mark.parametrize("path", PATHS)
def test_a_type_that_is_not_json_is_415_whatever_the_size(served: str, path: str) -> None:
    small = exchange(served, path, "text/plain", len(SMALL), SMALL)
    assert refused(small, 415, "unsupported-media-type"), small
    large = exchange(served, path, "text/plain", OVER, None)
    assert refused(large, 415, "unsupported-media-type"), large


@pytest.mark.parametrize("path", PATHS)
def test_json_over_the_limit_is_413_naming_it(served: str, path: str) -> None:
    answer = exchange(served, path, "application/json", OVER, None)
    assert refused(answer, 413, "body-too-large"), answer
    named = re.search(r'"max_bytes":\s*(\d+)', answer)
    assert named is not None and 0 < int(named[1]) <= 16 << 20, answer
    assert f"its Content-Length is {OVER}" in answer


@pytest.mark.parametrize("path", PATHS)
def test_a_body_streamed_past_the_limit_is_413(served: str, path: str) -> None:
    answer = streamed(served, path, (20 if path == BATCH_PATH else 3) << 20)
    assert refused(answer, 413, "body-too-large"), answer
    assert "bytes had arrived when it was refused" in answer


@pytest.mark.parametrize("path", PATHS)
def test_a_body_without_a_type_is_415(served: str, path: str) -> None:
    answer = exchange(served, path, None, len(SMALL), SMALL)
    assert refused(answer, 415, "unsupported-media-type"), answer


def test_one_operations_key_is_refused_before_its_body(served: str) -> None:
    answer = exchange(served, "/notes", "text/plain", OVER, None, key=False)
    assert refused(answer, 400, "bad-idempotency-key"), answer


def test_a_body_that_is_no_json_is_the_intakes_400_not_the_frameworks(served: str) -> None:
    """FastAPI decodes a body before any dependency runs: its 422 came first."""
    broken = b'{"id": "n1", "title": '
    answer = exchange(served, "/notes", "application/json", len(broken), broken)
    assert refused(answer, 400, "bad-json"), answer
