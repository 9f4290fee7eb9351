"""Reply classification: the table of DESIGN.md, as examples and as properties."""

from __future__ import annotations

import email.utils

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.core import wire
from pigeon.exceptions import (
    AuthorizationRequired,
    BatchRefused,
    ConflictError,
    KeyInProgress,
    PermanentError,
    RetryableError,
    UnknownOutcome,
)
from pigeon.sync.classify import ReplyKind, classify, delivers, parse_retry_after

NOW = 1_700_000_000.0
statuses = st.integers(min_value=100, max_value=599)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (200, ReplyKind.DELIVERED),
        (201, ReplyKind.DELIVERED),
        (202, ReplyKind.DELIVERED),
        (204, ReplyKind.DELIVERED),
        (408, ReplyKind.TRANSIENT),
        (425, ReplyKind.TRANSIENT),
        (429, ReplyKind.TRANSIENT),
        (500, ReplyKind.TRANSIENT),
        (502, ReplyKind.TRANSIENT),
        (503, ReplyKind.TRANSIENT),
        (401, ReplyKind.AUTH),
        (403, ReplyKind.AUTH),
        (412, ReplyKind.CONFLICT),
        (400, ReplyKind.PERMANENT),
        (404, ReplyKind.PERMANENT),
        (410, ReplyKind.PERMANENT),
        (422, ReplyKind.PERMANENT),
        (301, ReplyKind.REFUSED),
        (302, ReplyKind.REFUSED),
        (308, ReplyKind.REFUSED),
    ],
)
def test_status_table(status: int, kind: ReplyKind) -> None:
    assert classify(status, {}, None, now=NOW).kind is kind


def test_409_told_apart_by_problem_type() -> None:
    in_progress = classify(
        409,
        {"Retry-After": "2", "Content-Type": wire.PROBLEM_JSON},
        {"type": wire.PROBLEM_KEY_IN_PROGRESS},
        now=NOW,
    )
    assert in_progress.kind is ReplyKind.KEY_IN_PROGRESS
    assert in_progress.retry_after == 2.0
    assert in_progress.failure_kind == "transient"
    conflict = classify(409, {"Retry-After": "2"}, {"type": wire.PROBLEM_VERSION_CONFLICT}, now=NOW)
    assert conflict.kind is ReplyKind.CONFLICT
    assert conflict.failure_kind == "conflict"


def test_untyped_409_uses_retry_after_as_the_tie_breaker() -> None:
    assert classify(409, {"retry-after": "1"}, None, now=NOW).kind is ReplyKind.KEY_IN_PROGRESS
    assert classify(409, {}, {"detail": "x"}, now=NOW).kind is ReplyKind.CONFLICT
    blank = {"type": "about:blank", "title": "Conflict"}  # RFC 9457's "no type"
    assert classify(409, {"Retry-After": "1"}, blank, now=NOW).kind is ReplyKind.KEY_IN_PROGRESS
    assert classify(409, {}, blank, now=NOW).kind is ReplyKind.CONFLICT


def test_an_apps_own_typed_409_is_a_conflict_even_with_retry_after() -> None:
    """Only the key-in-progress type, or no type at all, means "still running this key"."""
    body = {"type": "urn:example:problem:duplicate-title", "title": "conflict"}
    outcome = classify(409, {"Retry-After": "5"}, body, now=NOW)
    assert outcome.kind is ReplyKind.CONFLICT and outcome.failure_kind == "conflict"
    assert "duplicate-title" in outcome.reason
    assert classify(409, {}, body, now=NOW).kind is ReplyKind.CONFLICT
    in_progress = {"type": wire.PROBLEM_KEY_IN_PROGRESS}  # typed: no Retry-After needed
    assert classify(409, {}, in_progress, now=NOW).kind is ReplyKind.KEY_IN_PROGRESS


def test_delivered_carries_unquoted_etag_whatever_the_header_case() -> None:
    outcome = classify(200, {"etag": 'W/"7"'}, {"id": 1}, now=NOW)
    assert outcome.etag == "7"
    assert outcome.body == {"id": 1}
    assert classify(201, {"ETag": '"abc"'}, None, now=NOW).etag == "abc"
    assert classify(204, {}, None, now=NOW).etag is None
    assert classify(200, {"ETag": '""'}, None, now=NOW).etag is None  # names no version
    assert classify(200, {"ETag": 'W/""'}, None, now=NOW).etag is None


def test_retry_after_on_429_and_503_in_both_forms() -> None:
    date = email.utils.formatdate(NOW + 30, usegmt=True)
    assert classify(429, {"Retry-After": "5"}, None, now=NOW).retry_after == 5.0
    assert classify(503, {"Retry-After": date}, None, now=NOW).retry_after == pytest.approx(30.0)
    assert classify(503, {}, None, now=NOW).retry_after is None


def test_permanent_reason_names_the_problem_detail() -> None:
    outcome = classify(
        422, {}, {"type": wire.PROBLEM_KEY_MISMATCH, "detail": "key reused"}, now=NOW
    )
    assert outcome.kind is ReplyKind.PERMANENT
    assert "key reused" in outcome.reason
    assert outcome.failure_kind == "permanent"


def test_exceptions() -> None:
    request = httpx.Request("POST", "http://x/notes")
    not_sent = classify(None, error=httpx.ConnectError("refused", request=request), now=NOW)
    assert not_sent.kind is ReplyKind.TRANSIENT and not not_sent.sent
    timeout = classify(None, error=httpx.ReadTimeout("slow", request=request), now=NOW)
    assert timeout.kind is ReplyKind.TRANSIENT and timeout.sent
    dropped = classify(None, error=httpx.RemoteProtocolError("eof", request=request), now=NOW)
    assert dropped.kind is ReplyKind.TRANSIENT and dropped.sent
    bad = classify(None, error=httpx.UnsupportedProtocol("ftp", request=request), now=NOW)
    assert bad.kind is ReplyKind.REFUSED and not bad.sent  # the base URL: pause the queue
    malformed = classify(None, error=httpx.LocalProtocolError("header", request=request), now=NOW)
    assert malformed.kind is ReplyKind.PERMANENT
    assert classify(None, error=OSError("reset"), now=NOW).kind is ReplyKind.TRANSIENT
    assert classify(None, error=UnknownOutcome("?"), now=NOW).kind is ReplyKind.TRANSIENT
    assert classify(None, error=PermanentError("no endpoint"), now=NOW).kind is (
        ReplyKind.PERMANENT
    )
    held = classify(None, error=KeyInProgress("busy", retry_after=3.0), now=NOW)
    assert held.kind is ReplyKind.KEY_IN_PROGRESS and held.retry_after == 3.0
    refused = classify(None, error=BatchRefused("no batch route", status=404), now=NOW)
    assert refused.kind is ReplyKind.REFUSED and refused.status == 404 and refused.sent
    with pytest.raises(ValueError, match="not a failure"):
        _ = refused.failure_kind  # never mark_failed: it pauses the queue instead


def test_outcome_error_is_the_typed_exception() -> None:
    assert isinstance(classify(503, now=NOW).error(), RetryableError)
    assert isinstance(classify(409, {"Retry-After": "1"}, now=NOW).error(), KeyInProgress)
    assert isinstance(classify(412, now=NOW).error(), ConflictError)
    assert isinstance(classify(401, now=NOW).error(), AuthorizationRequired)
    error = classify(404, now=NOW).error()
    assert isinstance(error, PermanentError) and error.status == 404
    with pytest.raises(ValueError, match="not a failure"):
        _ = classify(200, now=NOW).failure_kind


@given(statuses, st.dictionaries(st.sampled_from(["Retry-After", "ETag", "X"]), st.text()))
def test_every_status_has_exactly_one_reading(status: int, headers: dict[str, str]) -> None:
    outcome = classify(status, headers, None, now=NOW)
    assert (outcome.kind is ReplyKind.DELIVERED) == (200 <= status < 300)
    assert (outcome.kind is ReplyKind.AUTH) == (status in (401, 403))
    if outcome.kind is ReplyKind.TRANSIENT:
        assert status in (408, 425, 429) or status >= 500
    if status >= 500:
        assert outcome.kind is ReplyKind.TRANSIENT
    if outcome.retry_after is not None:
        assert outcome.retry_after >= 0
    assert outcome.status == status


@given(st.integers(min_value=0, max_value=10**9))
def test_retry_after_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), now=NOW) == seconds


@given(st.integers(min_value=-(10**6), max_value=10**7))
def test_retry_after_http_date_is_relative_to_now_and_never_negative(offset: int) -> None:
    value = email.utils.formatdate(NOW + offset, usegmt=True)
    assert parse_retry_after(value, now=NOW) == pytest.approx(max(0, offset), abs=1.0)


@given(st.text())
def test_retry_after_never_raises_and_never_goes_negative(text: str) -> None:
    value = parse_retry_after(text, now=NOW)
    assert value is None or value >= 0


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850
        "Sun Nov  6 08:49:37 1994",  # obsolete asctime: no zone, and GMT all the same
    ],
)
def test_retry_after_reads_all_three_http_date_formats_as_gmt(value: str) -> None:
    when = 784111777.0  # 1994-11-06 08:49:37 UTC, RFC 9110's example
    assert parse_retry_after(value, now=when - 120) == pytest.approx(120.0)
    outcome = classify(503, {"Retry-After": value}, None, now=when - 120)
    assert outcome.retry_after == pytest.approx(120.0)


@given(
    st.one_of(st.none(), statuses),
    st.sampled_from([None, httpx.ConnectError("down"), RetryableError("later")]),
)
def test_delivers_is_what_classify_calls_delivered(
    status: int | None, error: BaseException | None
) -> None:
    # The executor asks delivers() for each operation of a batch instead of classify().
    outcome = classify(status, {}, None, error, now=NOW)
    assert delivers(status, error) == (outcome.kind is ReplyKind.DELIVERED)
