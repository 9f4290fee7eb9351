"""Every option of every broker URL is checked against the broker's own rules before the
relay starts (pigeon.jobs.publishers.rules): a value the broker would refuse later is
refused now, naming the rule, as one line and exit 2 from the CLI. Found: a NATS
``subject_prefix=audit`` (no trailing '.') was taken, the relay made a stream with an
invalid subject and retried for ever with NoStreamResponseError."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.jobs.publishers import OPTIONS, BrokerURLError, check_broker_url, open_publisher
from pigeon.storage.server import open_server_db

from ..conftest import require_broker

REFUSED = [
    # NATS
    ("nats://127.0.0.1:4222?subject_prefix=audit", "ends with '.'"),
    ("nats://h?subject_prefix=.", "non-empty"),
    ("nats://h?subject_prefix=a..", "non-empty"),
    ("nats://h?subject_prefix=a.*.", "'*' or '>'"),
    ("nats://h?subject_prefix=a.>.", "'*' or '>'"),
    ("nats://h?subject_prefix=a%20b.", "whitespace"),
    ("nats://h?subject_prefix=$JS.", "server's own"),
    ("nats://h?stream=A.B", "stream name"),
    ("nats://h?stream=A*", "stream name"),
    ("nats://h?stream=a/b", "stream name"),
    ("nats://h?stream=" + "S" * 256, "stream name"),
    ("nats://h?dedup=nan", "expected seconds"),
    ("nats://h?dedup=inf", "expected seconds"),
    ("nats://h?dedup=0", "expected seconds"),
    ("nats://h?dedup=-1", "expected seconds"),
    ("nats://h?dedup=1e300", "expected seconds"),
    ("nats://h?dedup=soon", "expected seconds"),
    ("nats://h/stream", "no path"),
    # Redis
    ("redis://h?dedup=0", "whole seconds"),
    ("redis://h?dedup=1.5", "whole seconds"),
    ("redis://h?dedup=-3", "whole seconds"),
    ("redis://h?dedup=99999999999", "whole seconds"),
    ("redis://h?prefix=", "key prefix"),
    ("redis://h?prefix=a%20b", "key prefix"),
    ("redis://h/zero", "database number"),
    # RabbitMQ
    ("amqp://h?exchange=amq.topic", "reserved"),
    ("amqp://h?exchange=a%20b", "AMQP name"),
    ("amqp://h?exchange=", "AMQP name"),
    ("amqp://h?queue=q/1", "AMQP name"),
    ("amqp://h?queue=amq.gen", "reserved"),
    ("amqp://h?queue=" + "q" * 256, "AMQP name"),
    # every broker
    ("redis://h?prefix=a&prefix=b", "given twice"),
    ("amqp://h?queue=a&queue=b&queue=c", "more options"),
    ("nats://h?bogus=1", "unknown option 'bogus'"),
    ("redis://h%20x", "spaces or control"),
]
ACCEPTED = [
    "nats://127.0.0.1:4222?subject_prefix=audit.&stream=AUDIT&dedup=120",
    "nats://h?subject_prefix=a.b-c.d_e.&dedup=0.5",
    "tls://h:4222/",
    "redis://:pw@h:6379/3?prefix=app:&dedup=86400",
    "rediss://h",
    "amqp://guest:guest@h/vhost?exchange=app.events&queue=answers:all",
    "amqps://h",
]


@pytest.mark.parametrize(("url", "words"), REFUSED)
def test_a_value_the_broker_would_refuse_is_refused_now(url: str, words: str) -> None:
    with pytest.raises(BrokerURLError) as caught:
        check_broker_url(url)
    assert words in str(caught.value)
    with pytest.raises(BrokerURLError):
        open_publisher(url)  # the relay itself takes no other path


@pytest.mark.parametrize("url", ACCEPTED)
def test_what_the_brokers_take_is_accepted(url: str) -> None:
    check_broker_url(url)


def test_every_option_of_every_broker_has_a_refused_example() -> None:
    """An option added later without a rule (and a test of it) fails here."""
    for kind, options in OPTIONS.items():
        schemes = {"redis": "redis://", "nats": "nats://", "amqp": "amqp://"}
        for name in options:
            tried = [u for u, _ in REFUSED if u.startswith(schemes[kind]) and f"{name}=" in u]
            assert tried, f"no refused value of {kind} option {name!r} is tested"


@pytest.mark.parametrize(("url", "words"), REFUSED[::3])
def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path: Path, url: str, words: str) -> None:
    db = tmp_path / "server.db"
    open_server_db(str(db)).close()
    result = CliRunner().invoke(app, ["relay", "--db", str(db), "--to", url, "--once"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pigeon relay: ") and words in lines[0]


def test_a_stream_made_with_a_checked_prefix_takes_the_messages() -> None:
    """The rule is the broker's: a prefix it accepts makes a stream that confirms."""
    import asyncio
    import uuid

    import nats

    from pigeon.jobs.relay import Message

    base = require_broker("nats")
    name = f"pigeont{uuid.uuid4().hex[:8]}"
    url = f"{base}?stream={name.upper()}&subject_prefix={name}.audit."
    publisher = open_publisher(url)
    try:
        assert publisher.publish_many([Message("m-1", "answers.received", {}, 0.0, 1)]) == 0
    finally:
        publisher.close()

    async def drop() -> None:
        nc = await nats.connect(base)
        await nc.jetstream().delete_stream(name.upper())
        await nc.close()

    asyncio.run(drop())
