"""No pattern or parser that reads what an outsider sends is super-linear.

Issue 21 found one: with ``--log-level info``, ``GET /x?`` and 8,000 characters made the
log redactor's regular expression backtrack on the event loop for 13 s. The rule: every
log formatter, redactor and header, path, query and body parser finishes 1 MiB of hostile
text (runs of ``a``, ``=``, ``&``, ``%``, quotes, backslashes, listed names, mixes) in
well under half a second, and 1 MiB takes about 8 times what 128 KiB takes, not 64 (the
mark of a quadratic). Times are CPU seconds of this process, the least of up to three
tries: a loaded machine slows a run, it does not make a linear one quadratic.

tests/security/test_hostile_requests.py replays the finding against ``pigeon serve``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import pytest
from starlette.datastructures import QueryParams
from starlette.requests import HTTPConnection, cookie_parser

from pigeon.cli._format import markup_escaped, shown
from pigeon.core import strictjson
from pigeon.core.clock import HLCTimestamp
from pigeon.core.wire import unquote_etag
from pigeon.jobs.manager import describe
from pigeon.logs import (
    MAX_LOGGED_MESSAGE,
    REDACTED,
    JsonFormatter,
    Redactor,
    TextFormatter,
    summary,
)
from pigeon.ops.queries import error_class
from pigeon.server import identifiers
from pigeon.server.access import same_origin
from pigeon.server.auth import bearer_token
from pigeon.server.fingerprint import check_key
from pigeon.server.jwt_auth import JwtAuth
from pigeon.server.messages import route_path
from pigeon.server.testhooks import TestHooks

BIG = 1 << 20  # 1 MiB
SMALL = BIG // 8
BOUND = 0.5  # CPU seconds for 1 MiB
SLACK = 0.03  # below this a ratio says nothing
# Repeated to the size asked for. Each is a shape that made some pattern backtrack or
# rescan: runs of one character, separators, listed names with and without values,
# unclosed and escaped quotes, markup brackets after backslashes, 'İ' (lower() makes two
# characters of it), counts in parentheses.
PATTERNS = (
    "a",
    "=",
    "&",
    "%",
    '"',
    "'",
    "\\",
    " ",
    "a=&",
    "%00",
    "token",
    "tokena",
    "token=",
    "token=1 ",
    'token="\\"',
    "password: '",
    "Bearer ",
    "ap",
    "\\[a",
    "[a]",
    "(",
    "(1 of 2) ",
    "İ",
    "a=\"&%' \\;token,=:",
    "://a:b",  # a URL's user-info (pigeon.urls), never closed by an '@'
    "?token",
    "?password=&",
)


def hostile(pattern: str, size: int) -> str:
    return (pattern * (size // len(pattern) + 1))[:size]


def cpu_seconds(parse: Callable[[str], object], text: str) -> float:
    start = time.process_time()
    with contextlib.suppress(Exception):  # a refusal is an answer: its time counts
        parse(text)
    return time.process_time() - start


def too_slow(parse: Callable[[str], object], pattern: str, bound: float) -> str | None:
    """None when ``parse`` is fast and linear on ``pattern``, else what was measured."""
    big = small = 0.0
    for _ in range(3):
        small = cpu_seconds(parse, hostile(pattern, SMALL))
        big = cpu_seconds(parse, hostile(pattern, BIG))
        if big < bound and big <= 3 * 8 * small + SLACK:
            return None
    return f"{pattern!r}: {big:.3f} s for 1 MiB, {small:.4f} s for 128 KiB"


def assert_linear(
    parse: Callable[[str], object], patterns: tuple[str, ...] = PATTERNS, bound: float = BOUND
) -> None:
    slow = [found for p in patterns if (found := too_slow(parse, p, bound)) is not None]
    assert not slow, slow


# -- the logs ----------------------------------------------------------------------------


def access_record(target: str) -> logging.LogRecord:
    """uvicorn's access line, the one an outsider writes most of: the request target."""
    args = ("127.0.0.1:5000", "GET", "/notes?" + target, "1.1", 200)
    return logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None
    )


def message_record(text: str) -> logging.LogRecord:
    return logging.LogRecord("app", logging.WARNING, __file__, 1, text, None, None)


def field_record(text: str) -> logging.LogRecord:
    rec = logging.LogRecord("app", logging.WARNING, __file__, 1, "a field", None, None)
    rec.query = text
    return rec


LOGS: dict[str, Callable[[str], object]] = {
    "redactor text": Redactor().text,
    "redactor with configured names": Redactor(["ssn", "x-api-key"]).text,
    "redactor value": lambda text: Redactor().value({"q": [text], "token": text}),
    "summary": lambda text: summary(OSError(text)),
    "exception": lambda text: Redactor().exception(OSError(text)),
    "text format, access line": lambda text: TextFormatter().format(access_record(text)),
    "text format, message": lambda text: TextFormatter().format(message_record(text)),
    "text format, field": lambda text: TextFormatter().format(field_record(text)),
    "json format, access line": lambda text: JsonFormatter().format(access_record(text)),
    "json format, message": lambda text: JsonFormatter().format(message_record(text)),
    "json format, field": lambda text: JsonFormatter().format(field_record(text)),
    "job error": lambda text: describe(RuntimeError(text)),
    "error class": error_class,
    "error class, permanent": lambda text: error_class("permanent error: " + text),
    "cli shown": shown,
    "cli markup": markup_escaped,
}


@pytest.mark.parametrize("name", LOGS)
def test_every_log_formatter_and_redactor_is_linear(name: str) -> None:
    assert_linear(LOGS[name])


def test_the_redactor_still_hides_what_it_hid() -> None:
    r = Redactor()
    cases = {
        "GET /x?access_token=abc&b=1": "GET /x?access_token=[redacted]&b=1",
        "Authorization: Bearer abc.def": "Authorization: [redacted] [redacted]",
        'body {"password": "a \\" b", "x": 1}': 'body {"password": [redacted], "x": 1}',
        "X-Pigeon-Operator-Token: 'q w'": "X-Pigeon-Operator-Token: [redacted]",
        "TOKEN=ABC; basic Zm9v": "TOKEN=[redacted]; basic [redacted]",
        "İİ token=1": "İİ token=[redacted]",  # 'İ' lower-cases to two characters
        "client_secret_value = s3": "client_secret_value = [redacted]",
        'token="never closed': "token=[redacted] closed",  # a quote not closed: a word
        "a=token=b": "a=token=[redacted]",
    }
    for text, expected in cases.items():
        assert r.text(text) == expected, text
        assert r.text(expected) == expected, text  # twice is once (recorded, then shown)


def test_a_long_message_is_cut_before_it_is_redacted() -> None:
    """The bound that keeps a megabyte request line off the event loop's redactor: each
    string argument, then the message, cut short (a cut secret is hidden all the same)."""
    line = TextFormatter().format(access_record("token=" + "s" * BIG))
    assert len(line) < 2 * MAX_LOGGED_MESSAGE
    assert "s" * 10 not in line and f"token={REDACTED}" in line
    assert line.endswith('more characters] HTTP/1.1" 200')  # the status is still there
    alone = JsonFormatter().format(message_record("x" * BIG))
    assert len(alone) < 2 * MAX_LOGGED_MESSAGE and "more characters]" in alone


# -- headers, paths, queries, bodies -----------------------------------------------------


def connection(*headers: tuple[str, str]) -> HTTPConnection:
    raw = [(k.encode(), v.encode("utf-8", "surrogatepass")) for k, v in headers]
    return HTTPConnection({"type": "http", "headers": raw, "path": "/", "root_path": ""})


JWT = JwtAuth(secret="hostile-input-tests-secret-0123456789abcdef")

PARSERS: dict[str, Callable[[str], object]] = {
    "strict json": strictjson.loads,
    "strict json, a string": lambda text: strictjson.loads('"' + text + '"'),
    "resource id": identifiers.resource_id,
    "stored identifier": lambda text: identifiers.token(text, "id", 255),
    "header value": identifiers.header_value,
    "loggable": identifiers.loggable,
    "idempotency key": check_key,
    "etag": unquote_etag,
    "clock stamp": HLCTimestamp.decode,
    "route path": lambda text: route_path({"path": "/notes/" + text, "root_path": "/n"}),
    "bearer token": lambda text: bearer_token(connection(("authorization", "Bearer " + text))),
    "jwt": lambda text: JWT.verify(text + "." + text + "." + text),
    "origin": lambda text: same_origin(connection(("host", "h"), ("origin", "http://" + text))),
    "test hooks": lambda text: TestHooks.parse(
        {"X-Pigeon-Test-Delay": text, "X-Pigeon-Test-Set-Cookie": text}
    ),
    "cookies": cookie_parser,
}


@pytest.mark.parametrize("name", PARSERS)
def test_every_header_path_query_and_body_parser_is_linear(name: str) -> None:
    assert_linear(PARSERS[name])


def test_the_query_string_parser_is_linear() -> None:
    """Starlette's, the standard library's parse_qsl: a Python loop per field, about a
    second a megabyte of 'a=&', but linear; and pigeon serve's h11 takes a request head of
    at most 16 KiB (see the served test), whose query parses in milliseconds."""
    assert_linear(lambda text: QueryParams(text), bound=4 * BOUND)


# (head, piece): the piece repeated after the head, to the size asked for.
JSON_DOCUMENTS = (
    ('"', "\\u0000"),  # an escape the strict checks look for, again and again
    ('"', "\\\\"),
    ('"', "\\ud800\\udc00"),
    ('"', "\\ud800"),
    ("", "["),  # nesting
    ("{", '"a":'),
    ("[", "1,"),
    ("{", '"a":1,'),  # a duplicate key
    ("", "1"),  # a long number
    ("1.", "1"),
    ("", "-0.0e"),
)


@pytest.mark.parametrize(("head", "piece"), JSON_DOCUMENTS)
def test_strict_json_is_linear_on_hostile_documents(head: str, piece: str) -> None:
    """Documents whose one repeated piece is an escape the strict checks look for, a
    nesting, a duplicate key or a long number: refused or taken, in linear time."""
    assert_linear(lambda text: strictjson.loads(head + text), (piece,))
