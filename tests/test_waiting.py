"""tests.waiting: ``wait_for`` returns once the condition holds, else fails naming the
wait; ``until_answers`` waits for a server that is bound but not yet accepting, and is
the only wait for a server the tests write (a hand-written one, counted in tries without
a pause, gave up in a fraction of a second on a loaded machine and went on regardless).
And no test polls with a loop that only sleeps and has no deadline: a server that never
started hung the run until the CI's own timeout (``while not server.started``)."""

from __future__ import annotations

import ast
import itertools
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import processes
from tests.waiting import until_answers, wait_for

TESTS = Path(__file__).parent


def test_it_returns_as_soon_as_the_condition_holds() -> None:
    calls = itertools.count(1)
    wait_for(lambda: next(calls) >= 3, timeout=5, interval=0)
    assert next(calls) == 4


def test_at_the_deadline_it_fails_saying_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"after 0\.05 s waiting for the sky to fall"):
        wait_for(lambda: False, timeout=0.05, what="the sky to fall", interval=0.01)
    state = {"seen": 0}
    with pytest.raises(AssertionError, match="waiting for 1, seen 0"):
        wait_for(lambda: False, 0.05, lambda: f"1, seen {state['seen']}", 0.01)


def _bound_then_serving(delay: float) -> tuple[socket.socket, threading.Event]:
    """A socket bound now (connections refused), accepting after ``delay``: one
    request, answered 200."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    served = threading.Event()

    def serve() -> None:
        served.wait(delay)
        sock.listen()
        conn, _ = sock.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    return sock, served


def test_until_answers_waits_through_refused_connections() -> None:
    sock, _ = _bound_then_serving(0.5)
    with sock:
        until_answers(f"http://127.0.0.1:{sock.getsockname()[1]}/", timeout=10)


def test_until_answers_fails_at_once_when_the_server_process_ended() -> None:
    proc = processes.spawn([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait(10)
    with socket.socket() as sock:  # bound, never accepting: only the process can say
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(AssertionError, match="ended with 3 before"):
            until_answers(f"http://127.0.0.1:{sock.getsockname()[1]}/", timeout=10, proc=proc)
    processes.stop(proc)


def hand_written_server_waits(source: str) -> list[int]:
    """The lines of loops that catch an httpx error: a wait for a server, written by hand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.For, ast.While)):
            for handler in ast.walk(node):
                if not isinstance(handler, ast.ExceptHandler) or handler.type is None:
                    continue
                if "httpx." in ast.unparse(handler.type):
                    found.append(node.lineno)
                    break
    return found


def _found_in_tests(find: Callable[[str], list[int]], skipped: set[str]) -> dict[str, list[int]]:
    """What ``find`` finds in each test file but those named in ``skipped``: file -> lines."""
    return {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if path.name not in skipped and (lines := find(path.read_text(encoding="utf-8")))
    }


def test_no_test_writes_its_own_wait_for_a_server() -> None:
    found = _found_in_tests(hand_written_server_waits, {"waiting.py"})
    assert found == {}, "wait with tests.waiting.until_answers (or answers)"


def test_the_scan_finds_a_hand_written_wait() -> None:
    source = (
        "for _ in range(200):\n"
        "    try:\n"
        "        httpx.get(url)\n"
        "        break\n"
        "    except httpx.TransportError:\n"
        "        pass\n"
    )
    assert hand_written_server_waits(source) == [1]
    assert hand_written_server_waits("try:\n    f()\nexcept httpx.HTTPError:\n    pass\n") == []


def unbounded_sleep_loops(source: str) -> list[int]:
    """The lines of ``while`` loops that only sleep and whose condition names no time: a
    wait with no deadline."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.While) or node.orelse:
            continue
        only_sleeps = all(
            isinstance(stmt, ast.Expr) and ast.unparse(stmt.value).startswith("time.sleep(")
            for stmt in node.body
        )
        condition = ast.unparse(node.test)
        if only_sleeps and not any(word in condition for word in ("monotonic", "deadline")):
            found.append(node.lineno)
    return found


# Client processes that drain until done: the test that starts each bounds it, and its
# fixture kills it.
_DRAINING_CLIENTS = {"chaos_client.py", "multinode_client.py"}


def test_no_test_polls_without_a_deadline() -> None:
    found = _found_in_tests(unbounded_sleep_loops, _DRAINING_CLIENTS)
    assert found == {}, "wait with tests.waiting.wait_for, which fails at its deadline"


def test_the_scan_finds_a_loop_that_only_sleeps() -> None:
    assert unbounded_sleep_loops("while not server.started:\n    time.sleep(0.01)\n") == [1]
    bounded = "while not ready() and time.monotonic() < deadline:\n    time.sleep(0.01)\n"
    assert unbounded_sleep_loops(bounded) == []
    assert unbounded_sleep_loops("while True:\n    time.sleep(1)\n    poll()\n") == []
