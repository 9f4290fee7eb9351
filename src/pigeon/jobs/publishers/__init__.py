"""Broker publishers for the outbox relay, one module per broker, each imported only when
its URL scheme is asked for: the core needs none of the broker clients (``pip install
'pigeon[relay]'`` brings them).

==================  ============================  =========================================
URL                 confirmation                  a re-publication after a crash
==================  ============================  =========================================
``redis://``        the script's reply            dropped by Redis (marker set with XADD)
``nats://``         the JetStream PubAck          dropped by the stream's duplicate window
``amqp://``         the publisher confirm (ack)   delivered again: consumers dedup by id
==================  ============================  =========================================
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pigeon.exceptions import ConfigurationError
from pigeon.jobs.publishers.rules import OPTIONS as OPTIONS
from pigeon.jobs.publishers.rules import Rule, check_path
from pigeon.urls import redact_url

SCHEMES = {
    "redis": "redis",
    "rediss": "redis",
    "nats": "nats",
    "tls": "nats",
    "amqp": "amqp",
    "amqps": "amqp",
}
EXTRA = {"redis": "redis", "nats": "nats-py", "amqp": "aio-pika"}
CLIENT = {"redis": "redis", "nats": "nats", "amqp": "aio_pika"}  # import names
_HOST = re.compile(r"[^\s\x00-\x1f\x7f<>\"{}|\\^`]{1,255}")


class BrokerURLError(ConfigurationError):
    """A broker URL the relay cannot use: unknown scheme, no host, a bad option."""


def broker_kind(url: str) -> str:
    """``redis``, ``nats`` or ``amqp`` for ``url``, or ``BrokerURLError`` saying why not.
    The URL is quoted with its credentials hidden (`pigeon.urls.redact_url`)."""
    parts = urlsplit(url)
    shown = redact_url(url)
    if not parts.scheme:
        raise BrokerURLError(
            f"{shown!r} is not a broker URL: expected redis://, nats:// or amqp://"
        )
    kind = SCHEMES.get(parts.scheme.lower())
    if kind is None:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise BrokerURLError(f"unknown broker scheme {parts.scheme + '://'!r}: expected {known}")
    if not parts.hostname:
        raise BrokerURLError(f"{shown!r} names no host")
    if not _HOST.fullmatch(unquote(parts.hostname)):  # as the clients decode it
        raise BrokerURLError(f"{shown!r}: the host name has spaces or control characters")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
        check_path(kind, parts.path)
    except ValueError as exc:
        raise BrokerURLError(f"{shown!r}: {exc}") from None
    return kind


def url_options(url: str, allowed: dict[str, Rule]) -> dict[str, Any]:
    """The ``?name=value`` options of a broker URL, each checked by its rule (`rules`);
    an unknown one, an empty one or one given twice refused."""
    options: dict[str, Any] = {}
    known = ", ".join(sorted(allowed)) or "none"
    try:
        pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True, max_num_fields=len(allowed))
    except ValueError:
        raise BrokerURLError(f"more options in the broker URL than it takes ({known})") from None
    for name, value in pairs:
        if name not in allowed:
            raise BrokerURLError(f"unknown option {name!r} in the broker URL (options: {known})")
        if name in options:
            raise BrokerURLError(f"option {name!r} is given twice in the broker URL")
        try:
            options[name] = allowed[name](value)
        except ValueError as exc:
            raise BrokerURLError(f"option {name}={value!r} in the broker URL: {exc}") from None
    return options


def strip_query(url: str) -> str:
    return urlsplit(url)._replace(query="", fragment="").geturl()


def check_broker_url(url: str) -> str:
    """Everything about ``url`` that can be checked without the broker: scheme, host,
    port, options, and that the broker's client library is installed. Returns its kind."""
    kind = broker_kind(url)
    url_options(url, OPTIONS[kind])  # the publisher's from_url reads them again
    if importlib.util.find_spec(CLIENT[kind]) is None:
        raise ConfigurationError(
            f"publishing to {kind} needs the {EXTRA[kind]!r} package: pip install 'pigeon[relay]'"
        )
    return kind


def open_publisher(url: str) -> Any:
    """The publisher for ``url`` (it connects on first use, so a broker that is down now
    only delays the relay). Raises ``BrokerURLError`` for a URL it cannot use and
    ``ConfigurationError`` when the broker's client library is not installed."""
    kind = broker_kind(url)
    try:
        module = importlib.import_module(f"pigeon.jobs.publishers.{kind}")
    except ImportError as exc:
        raise ConfigurationError(
            f"publishing to {kind} needs the {EXTRA[kind]!r} package: "
            f"pip install 'pigeon[relay]' ({exc})"
        ) from exc
    return module.from_url(url)
