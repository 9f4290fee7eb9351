"""Identifiers and header values at the trust boundary: what an id may be, how long what
pigeon stores from a request may be, and how what it writes into a header is encoded.

**Resource ids** (a note's id, an LWW or CRDT resource's id; in the body or in the
path): 1 to ``MAX_ID_LENGTH`` (255) characters, a JSON string or an integer (``42`` is
the note ``"42"``, as in the path); any printable character of any script (letters,
digits, punctuation, symbols, emoji, the ASCII space: ``str.isprintable``) except ``/``,
and not ``.`` or ``..``. So ``€uro``, ``東京`` or ``a b`` are ids, written into a path
percent-encoded (``/notes/%E2%82%ACuro``); refused with 400: an object, a boolean, a
float or null given as an id (never stringified: ``"{'a': 1}"``, ``"True"``), control
characters (``\\n``, ``\\u0000``), other separators and format characters (no-break
space, U+2028, zero-width joiner), and ``/``, which no path can carry (``%2F`` is
decoded before routing) so the resource could never be addressed again, like the dot
segments that clients remove from a path. Every segment of every request's path is held
to the same rule before routing (``path_problem``), so a path parameter is always one.

**Other identifiers** a request gives and pigeon stores (``X-Pigeon-Operation-Id`` and a
batch entry's ``id``, ``entity``, ``if_match``; the ``Idempotency-Key`` has its own
check in `pigeon.server.fingerprint`): strings of 1 to their limit of printable
characters. **Header values** pigeon writes are visible ASCII: ``header_value`` percent-
encodes anything else, so a handler's ``Location`` naming a non-ASCII id can never make
a committed write answer 500 (as it did: Starlette encodes header values as Latin-1).
"""

from __future__ import annotations

from typing import TypeGuard
from urllib.parse import quote, unquote_to_bytes

from pigeon.checks import is_int

# Re-exported for the server's handlers: the one path-segment encoder (pigeon.core).
from pigeon.core.identifiers import path_segment as path_segment
from pigeon.core.printable import printable
from pigeon.exceptions import ValidationError

MAX_ID_LENGTH = 255  # a resource id: part of a primary key (PostgreSQL: 2704 bytes an entry)
MAX_OPERATION_ID_LENGTH = 255  # X-Pigeon-Operation-Id, a batch entry's "id"
MAX_ENTITY_LENGTH = 512  # "<type>:<id>", the id itself at most MAX_ID_LENGTH
MAX_ETAG_LENGTH = 255  # If-Match, a batch entry's "if_match"
MAX_PATH_LENGTH = 2048  # a batch entry's path (a single request's is bounded by its head)
MAX_METHOD_LENGTH = 16


class InvalidIdentifier(ValidationError, ValueError):
    """An identifier outside its alphabet or length: the message says which and why.

    A ``ValidationError`` (400, nothing stored) wherever it is raised: an id that a handler
    checks itself is the client's mistake like any other, never a 500. (Still a
    ``ValueError`` for callers that caught it as one.)"""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, slug="bad-identifier")


def resource_id(value: object, what: str = "id") -> str:
    """``value`` as a resource id, or ``InvalidIdentifier`` naming what is wrong."""
    if type(value) is not str:  # nearly every id is one: checked three times an operation
        value = _number_id(value, what)
    if not value:
        raise InvalidIdentifier(f"the {what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidIdentifier(
            f"the {what} is {len(value)} characters, at most {MAX_ID_LENGTH} allowed"
        )
    if "/" in value or value in (".", ".."):
        raise InvalidIdentifier(
            f"the {what} {value!r} cannot be a path segment ('/', '.' and '..' are refused)"
        )
    if not printable(value):
        raise InvalidIdentifier(
            f"the {what} {value!r} holds a control, separator or format character"
        )
    return value


def _number_id(value: object, what: str) -> str:
    if isinstance(value, float) and value.is_integer():
        # JSON has one kind of number: 42.0 is the integer 42 to JSON Schema, and to the
        # published contract (`pigeon.server.contract.INTEGER_ID`), so the note "42" here.
        value = int(value)
    if is_int(value):
        return str(value)
    if not isinstance(value, str):
        raise InvalidIdentifier(f"the {what} must be a string or an integer, not {_kind(value)}")
    return str(value)  # a subclass of str, as the str it holds


def id_problem(value: object, what: str = "id") -> str | None:
    """The refusal's detail when ``value`` is no resource id, else None."""
    try:
        resource_id(value, what)
    except InvalidIdentifier as exc:
        return str(exc)
    return None


def path_problem(path: str, raw: str | bytes | None = None) -> str | None:
    """THE identifier check of a request path, for every route (`pigeon.server.pathcheck`
    applies it to each request before routing, a batch entry's path gets it too): why
    ``path`` (percent-decoded, as routed) is refused with 400 ``bad-path``, else None.

    Each non-empty segment (every path parameter is one, or a part of one) must be a
    resource id (``resource_id``: 1 to ``MAX_ID_LENGTH`` printable characters, not ``.``
    or ``..``), and ``raw`` (the path as sent, percent-encoded), when given, must decode
    to UTF-8: ``%FF`` or an encoded surrogate (``%ED%A0%80``) decodes to U+FFFD, which
    would otherwise pass as printable. (Only then is ``raw`` decoded again: a path without
    U+FFFD came from valid UTF-8.)"""
    for segment in path.split("/"):
        if segment:
            problem = id_problem(segment, "path segment")
            if problem is not None:
                return problem
    if raw is not None and "\ufffd" in path:
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return "the path is not UTF-8 once percent-decoded"
    return None


def is_token(value: object, max_length: int) -> TypeGuard[str]:
    """Is ``value`` what ``token`` takes unchanged: told without naming it (a batch reads
    an id and an entity per entry, nearly always valid)."""
    return isinstance(value, str) and 0 < len(value) <= max_length and printable(value)


def token(value: object, what: str, max_length: int) -> str:
    """A stored identifier: a string of 1 to ``max_length`` printable characters."""
    if is_token(value, max_length):
        return value
    if not isinstance(value, str):
        raise InvalidIdentifier(f"{what} must be a string, not {_kind(value)}")
    if not value:
        raise InvalidIdentifier(f"{what} must not be empty")
    if len(value) > max_length:
        raise InvalidIdentifier(f"{what} is {len(value)} characters, at most {max_length} allowed")
    raise InvalidIdentifier(f"{what} must be printable text")


def optional_token(value: object, what: str, max_length: int) -> str | None:
    """``token``, with null and an absent value (None) taken as "not given"."""
    return None if value is None else token(value, what, max_length)


def header_value(value: str) -> str:
    """``value`` as a header value that every HTTP/1.1 stack carries unchanged: visible
    ASCII and spaces as they are, anything else (non-ASCII, CR, LF, NUL) percent-encoded
    as UTF-8. Already ASCII values (every one pigeon makes) come back as they are."""
    if value.isascii() and value.isprintable():
        return value
    # surrogatepass: a lone surrogate a handler made is still encoded, never a 500. Byte by
    # byte in one call (a character at a time took 3 s a megabyte of non-ASCII text).
    return quote(value.encode("utf-8", "surrogatepass"), safe=_VISIBLE_ASCII)


_VISIBLE_ASCII = "".join(map(chr, range(0x20, 0x7F)))  # kept as they are, '%' too


MAX_LOGGED = 300  # characters of one request-given string in a log line


def loggable(value: str) -> str:
    """``value`` fit for a log line: control and other non-printable characters escaped
    (a path with a decoded CR/LF must not start a forged line), and cut short."""
    if len(value) > MAX_LOGGED:
        value = value[:MAX_LOGGED] + "..."
    if value.isprintable():
        return value
    return value.encode("unicode_escape", "backslashreplace").decode("ascii")


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
