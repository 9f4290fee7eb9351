"""What each broker accepts in the names and numbers a relay URL sets, checked before the
relay starts: a value the broker would refuse later (a NATS subject prefix without its
trailing '.', say, made a stream with an invalid subject, and the relay retried for ever)
is refused at once, saying what the rule is.

Each rule takes the option's text and returns the value, or raises ``ValueError`` whose
message says what is expected. The patterns are single character classes with bounded
lengths: linear, whatever the text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from pigeon.checks import is_finite

Rule = Callable[[str], Any]
MAX_DEDUP = 365 * 86400  # a year: beyond it the broker's own arithmetic overflows

# NATS (ADR-6): a stream name has no whitespace, '.', '*', '>', path separators or
# control characters; at most 255 characters.
_NATS_NAME = re.compile(r"[^\s.*>/\\\x00-\x1f\x7f]{1,255}")
# A subject token: no whitespace, '.', or wildcard ('*', '>').
_NATS_TOKEN = re.compile(r"[^\s.*>\x00-\x1f\x7f]{1,255}")
# AMQP 0-9-1 exchange and queue names: letters, digits, '-', '_', '.', ':'; at most 255.
_AMQP_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
# A Redis key prefix: printable, no whitespace; at most 255.
_REDIS_PREFIX = re.compile(r"[^\s\x00-\x1f\x7f]{1,255}")
_WHOLE = re.compile(r"[0-9]{1,12}")


def whole_seconds(text: str) -> int:
    """Whole seconds, 1 to a year (a Redis marker's lifetime: ``SET ... EX``)."""
    if not _WHOLE.fullmatch(text) or not 1 <= int(text) <= MAX_DEDUP:
        raise ValueError(f"expected whole seconds from 1 to {MAX_DEDUP}")
    return int(text)


def window_seconds(text: str) -> float:
    """Seconds, more than 0 and at most a year (NATS's duplicate window)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (is_finite(value) and 0 < value <= MAX_DEDUP):
        raise ValueError(f"expected seconds, more than 0 and at most {MAX_DEDUP}")
    return value


def nats_stream(text: str) -> str:
    if not _NATS_NAME.fullmatch(text):
        raise ValueError(
            "a NATS stream name is 1-255 characters without whitespace, '.', '*', '>', "
            "'/', '\\' or control characters"
        )
    return text


def nats_subject_prefix(text: str) -> str:
    """``token.`` or ``token.token.``: the relay publishes to ``<prefix><topic>`` and the
    stream it makes captures ``<prefix>>``, so the prefix ends with '.'; no wildcards."""
    tokens = text.split(".")
    if len(text) > 255 or len(tokens) < 2 or tokens[-1] != "":
        raise ValueError(
            "a NATS subject prefix ends with '.' (e.g. 'audit.'): the relay publishes to "
            "<prefix><topic>"
        )
    for token in tokens[:-1]:
        if not _NATS_TOKEN.fullmatch(token):
            raise ValueError(
                "each token of a NATS subject prefix is non-empty, without whitespace, '*' or '>'"
            )
    if tokens[0].startswith("$"):
        raise ValueError("subjects starting with '$' are the server's own ($JS, $SYS)")
    return text


def amqp_name(text: str) -> str:
    if not _AMQP_NAME.fullmatch(text):
        raise ValueError("an AMQP name is 1-255 characters: letters, digits, '-', '_', '.', ':'")
    if text.startswith("amq."):
        raise ValueError("names starting with 'amq.' are reserved by the broker")
    return text


def redis_prefix(text: str) -> str:
    if not _REDIS_PREFIX.fullmatch(text):
        raise ValueError("a Redis key prefix is 1-255 characters, without whitespace")
    return text


# The ?name=value options each broker URL takes, and the rule for each.
OPTIONS: dict[str, dict[str, Rule]] = {
    "redis": {"prefix": redis_prefix, "dedup": whole_seconds},
    "nats": {"stream": nats_stream, "subject_prefix": nats_subject_prefix, "dedup": window_seconds},
    "amqp": {"exchange": amqp_name, "queue": amqp_name},
}


def check_path(kind: str, path: str) -> None:
    """The URL's path: Redis's database number, nothing for NATS, any AMQP vhost."""
    if kind == "redis" and path not in ("", "/") and not _WHOLE.fullmatch(path[1:]):
        raise ValueError(f"the path of a Redis URL is a database number (/0), not {path!r}")
    if kind == "nats" and path not in ("", "/"):
        raise ValueError(f"a NATS URL has no path, not {path!r}")
