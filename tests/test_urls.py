"""pigeon.urls hides the credentials of every URL in a text, and takes linear time on
text an outsider controls."""

from __future__ import annotations

import time

import pytest

from pigeon.urls import MASK, redact_url, redact_urls, url_secrets

CANARY = "Cn4ry-Pw"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"redis://:{CANARY}@127.0.0.1:6379/0?prefix=x", "redis://:***@127.0.0.1:6379/0?prefix=x"),
        (f"postgresql://ada:{CANARY}@db:5432/app", "postgresql://ada:***@db:5432/app"),
        (f"postgresql://db/app?sslmode=require&password={CANARY}", None),
        (f"nats://{CANARY}@h:4222", "nats://***@h:4222"),  # a NATS token
        (f"amqp://guest:{CANARY}@[::1]:5672/vh", "amqp://guest:***@[::1]:5672/vh"),
        (f"unknown option 'bogus' in 'redis://:{CANARY}@localhost' (x)", None),
        (f"redis://:pa@{CANARY}@host/0", "redis://:***@host/0"),  # '@' in the password
        (f"redis://:p#{CANARY}@host", "redis://:***@host"),  # a raw '#' in it
        (f"a=amqp://u:{CANARY}@h/v?next=redis://:{CANARY}@h2", None),  # two in one
        (f"mongodb://u:{CANARY}@h1,h2/db", None),
        ("https://example.com/a?b=1 and plain text", "https://example.com/a?b=1 and plain text"),
    ],
)
def test_the_credentials_are_hidden(text: str, shown: str | None) -> None:
    result = redact_urls(text)
    assert (CANARY not in result and MASK in result) or shown == text
    if shown is not None:
        assert result == shown
    assert redact_url(text) == result


def test_url_secrets_lists_the_credentials_as_written_and_decoded() -> None:
    assert set(url_secrets("postgresql://u:p%40ss%zz@h/db?password=s3cret")) == {
        "p%40ss%zz",
        "p@ss%zz",
        "s3cret",
    }
    assert url_secrets(f"nats://{CANARY}@h") == (CANARY,)
    assert url_secrets("server.db") == () and url_secrets("redis://h:1/0") == ()


HOSTILE = [
    "a" * 2**20,
    "://" * 350_000,
    "a://" * 262_144,
    "a://" + "@" * 2**20,
    "a://" + ":" * 2**20,
    "a://" + "'" * 2**20,
    "://:@" * 200_000,
    "http://h?" + "&password=" * 100_000,
    "?" + "&" * 2**20,
    "=" * 2**20,
    "a://b:c@" * 130_000,
    "%" * 2**20,
    "a=&" * 350_000,
    "a=\"&%' \\;token,=:" * 55_000,
]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:12]))
def test_a_megabyte_of_hostile_text_takes_linear_time(text: str) -> None:
    started = time.perf_counter()
    redact_urls(text)
    url_secrets(text)
    # Linear: under a second here, a few on a loaded 2-core machine; a backtracking
    # pattern takes minutes on these.
    assert time.perf_counter() - started < 5.0
