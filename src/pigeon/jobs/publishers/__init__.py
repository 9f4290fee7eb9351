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
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pigeon.exceptions import ConfigurationError

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
# The ?name=value options each broker URL takes, and their types.
OPTIONS: dict[str, dict[str, type]] = {
    "redis": {"prefix": str, "dedup": int},
    "nats": {"stream": str, "subject_prefix": str, "dedup": float},
    "amqp": {"exchange": str, "queue": str},
}


class BrokerURLError(ConfigurationError):
    """A broker URL the relay cannot use: unknown scheme, no host, a bad option."""


def broker_kind(url: str) -> str:
    """``redis``, ``nats`` or ``amqp`` for ``url``, or ``BrokerURLError`` saying why not."""
    parts = urlsplit(url)
    if not parts.scheme:
        raise BrokerURLError(f"{url!r} is not a broker URL: expected redis://, nats:// or amqp://")
    kind = SCHEMES.get(parts.scheme.lower())
    if kind is None:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise BrokerURLError(f"unknown broker scheme {parts.scheme + '://'!r}: expected {known}")
    if not parts.hostname:
        raise BrokerURLError(f"{url!r} names no host")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
    except ValueError as exc:
        raise BrokerURLError(f"{url!r}: {exc}") from None
    return kind


def url_options(url: str, allowed: dict[str, type]) -> dict[str, Any]:
    """The ``?name=value`` options of a broker URL, each converted; unknown ones refused."""
    options: dict[str, Any] = {}
    for name, values in parse_qs(urlsplit(url).query, keep_blank_values=True).items():
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise BrokerURLError(f"unknown option {name!r} in {url!r} (options: {known})")
        try:
            options[name] = allowed[name](values[-1])
        except ValueError:
            raise BrokerURLError(f"option {name}={values[-1]!r} in {url!r} is not valid") from None
    return options


def strip_query(url: str) -> str:
    return urlsplit(url)._replace(query="", fragment="").geturl()


def check_broker_url(url: str) -> str:
    """Everything about ``url`` that can be checked without the broker: scheme, host,
    port, options, and that the broker's client library is installed. Returns its kind."""
    kind = broker_kind(url)
    url_options(url, OPTIONS[kind])
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
