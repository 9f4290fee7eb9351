"""The relay's count of round trips (tests/pgwire.py), message by message: what a turn is."""

from __future__ import annotations

import struct

from tests.pgwire import _Messages

STARTUP = struct.pack("!ii", 8, 196608)


def _msg(kind: bytes) -> bytes:
    return kind + struct.pack("!i", 4)  # a message with an empty body


def _connected() -> _Messages:
    messages = _Messages()
    assert messages.spoken(STARTUP, after_answer=True) == (0, 1)
    return messages


def test_a_flush_behind_an_answered_sync_starts_no_turn() -> None:
    messages = _connected()
    assert messages.spoken(_msg(b"E") + _msg(b"S"), after_answer=True) == (1, 1)
    # psycopg leaving a pipeline: a Flush behind the Sync, after its answer on a busy machine
    assert messages.spoken(_msg(b"H"), after_answer=True) == (0, 0)
    assert messages.spoken(_msg(b"E") + _msg(b"E") + _msg(b"S"), after_answer=True) == (2, 1)


def test_a_pipeline_split_around_an_early_answer_is_one_turn() -> None:
    messages = _connected()
    assert messages.spoken(_msg(b"P") + _msg(b"B"), after_answer=True) == (0, 1)
    assert messages.spoken(_msg(b"E") + _msg(b"S"), after_answer=True) == (1, 0)
    assert messages.spoken(_msg(b"Q"), after_answer=True) == (1, 1)


def test_a_message_split_across_reads_counts_once_complete() -> None:
    messages = _connected()
    whole = _msg(b"E") + _msg(b"S")
    assert messages.spoken(whole[:3], after_answer=True) == (0, 0)
    assert messages.spoken(whole[3:], after_answer=False) == (1, 1)
    assert messages.spoken(_msg(b"Q"), after_answer=False) == (1, 0)  # no answer between


def _parse(name: bytes, query: bytes) -> bytes:
    body = name + b"\0" + query + b"\0" + struct.pack("!h", 0)
    return b"P" + struct.pack("!i", 4 + len(body)) + body


def test_a_statement_with_parameters_sent_as_text_is_counted_parsed() -> None:
    messages = _connected()
    messages.spoken(_parse(b"", b"BEGIN") + _parse(b"", b"SELECT $1"), after_answer=True)
    assert messages.parsed == 1  # BEGIN has no parameters: nothing to prepare
    messages.spoken(_parse(b"", b"SELECT $1, $2") + _msg(b"S"), after_answer=False)
    assert messages.parsed == 2
    messages.spoken(_msg(b"B") + _msg(b"E") + _msg(b"S"), after_answer=True)  # a prepared one
    assert messages.parsed == 2
