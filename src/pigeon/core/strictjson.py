"""The one strict JSON decoder for every body pigeon reads (docs/design.md, "Trust boundary").

Python's ``json.loads`` takes more than JSON (RFC 8259) and more than the stores can keep:
``NaN`` and ``Infinity`` (echoed back as bare ``NaN``, which is not JSON), ``1e400`` (read
as ``inf``), duplicate object keys (the last one silently wins), lone UTF-16 surrogates
(``"\\ud800"``, which no UTF-8 encoder, and so no store, accepts) and NUL characters
(``"\\u0000"``, which PostgreSQL text cannot hold). Each is refused here, on every
backend alike, with a ``JsonRefused`` naming the problem (``problem``: a short slug, the
message: what and where), as is nesting deeper than ``MAX_JSON_DEPTH`` and any byte
sequence that is not UTF-8.

``loads`` decodes a whole document; ``loads_members`` decodes a top-level object whose
one array member is read element by element, refusing it as soon as it holds more than
``max_items`` elements: a 16 MiB batch of empty objects costs a thousand small decodes,
not millions of dicts. Pure code, no I/O; stdlib ``json`` underneath (its C scanner does
the work, the hooks below only refuse).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from pigeon.core.wire import MAX_JSON_DEPTH as MAX_JSON_DEPTH  # one limit, the wire's

__all__ = ["MAX_JSON_DEPTH", "JsonRefused", "TooManyItems", "loads", "loads_members"]

_SHOWN = 60  # characters of an offending key or number quoted in a message


class JsonRefused(ValueError):
    """Not JSON pigeon takes; ``problem`` is one of: encoding, syntax, constant,
    number-range, duplicate-key, lone-surrogate, nul, too-deep, too-many."""

    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem


class TooManyItems(JsonRefused):
    """``loads_members``: the array member has more than ``max_items`` elements."""

    def __init__(self, member: str, max_items: int) -> None:
        super().__init__(
            "too-many", f"{member!r} has more than {max_items} elements (at most {max_items})"
        )
        self.member = member
        self.max_items = max_items


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _constant(name: str) -> NoReturn:
    raise JsonRefused("constant", f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused("number-range", f"the number {_shown(text)} is beyond a double's range")
    return value


_MAX_INT = int(sys.float_info.max)


def _int(text: str) -> int:
    # An integer no double can hold is no portable JSON number (RFC 8259, section 6),
    # and int() of one over 4300 digits is a ValueError of its own.
    if len(text) > 310:
        raise JsonRefused("number-range", f"the number {_shown(text)} is beyond a double's range")
    value = int(text)
    if abs(value) > _MAX_INT:
        raise JsonRefused("number-range", f"the number {_shown(text)} is beyond a double's range")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonRefused(
                    "duplicate-key", f"the key {_shown(key)} appears twice in an object"
                )
            seen.add(key)
    return result


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object, parse_float=_float, parse_int=_int, parse_constant=_constant
)
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)
_WS = re.compile(r"[ \t\n\r]*")
_AFTER_ITEM = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
# Escapes that may decode to something refused: cheap to look for, so the exact checks
# below run only on the rare text that has one.
_SUSPECT = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
# A \u0000 escape that is one: preceded by an even number of backslashes (an odd one
# makes it the text "\u0000" after an escaped backslash). Outside strings JSON has no
# backslash, so this holds on any text the decoder took.
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _text(data: bytes | bytearray | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")  # strict: no BOM sniffing, no UTF-16 (RFC 8259, 8.1)
    except UnicodeDecodeError as exc:
        raise JsonRefused("encoding", f"not UTF-8: byte {exc.start} is invalid") from None


def _syntax(exc: json.JSONDecodeError) -> JsonRefused:
    return JsonRefused("syntax", f"{exc.msg} at line {exc.lineno} column {exc.colno}")


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a decoded value, without recursion (stops past ``limit``)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= limit:  # deeper is refused anyway: no need to walk on
                children = item.values() if isinstance(item, dict) else item
                stack.extend((child, depth + 1) for child in children)
    return deepest


def _too_deep(max_depth: int) -> JsonRefused:
    return JsonRefused("too-deep", f"nested deeper than {max_depth} levels")


def _value_at(
    text: str, start: int, max_depth: int, suspect: bool, outer: int = 0
) -> tuple[Any, int]:
    """The value at ``start`` (no whitespace before it) and where it ends, checked;
    ``outer``: levels of the document around it."""
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:  # the scanner's "no value here"
        raise _syntax(json.JSONDecodeError("Expecting value", text, exc.value)) from None
    except json.JSONDecodeError as exc:
        raise _syntax(exc) from None
    except RecursionError:
        raise _too_deep(max_depth) from None
    # Each level takes an opening and a closing bracket: a text shorter than twice the
    # levels left cannot be too deep, nor, mostly, one with fewer brackets than that.
    if (
        end - start > 2 * (max_depth - outer)
        and text.count("[", start, end) + text.count("{", start, end) + outer > max_depth
        and _depth(value, max_depth) + outer > max_depth
    ):
        raise _too_deep(max_depth)
    if suspect:
        if _NUL.search(text, start, end):
            raise JsonRefused(
                "nul", "a string holds a NUL character (\\u0000), which no store keeps"
            )
        try:
            _ENCODER.encode(value).encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRefused(
                "lone-surrogate", "a string holds a lone UTF-16 surrogate (e.g. \\ud800)"
            ) from None
    return value, end


def _skip(text: str, at: int) -> int:
    found = _WS.match(text, at)
    assert found is not None  # matches the empty string anywhere
    return found.end()


def _expect(text: str, at: int, chars: str, what: str) -> str:
    if at >= len(text) or text[at] not in chars:
        raise _syntax(json.JSONDecodeError(f"Expecting {what}", text, at))
    return text[at]


def loads(data: bytes | bytearray | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of ``data``, or ``JsonRefused`` naming what is wrong with it."""
    text = _text(data)
    suspect = _SUSPECT.search(text) is not None
    value, end = _value_at(text, _skip(text, 0), max_depth, suspect)
    if _skip(text, end) != len(text):
        raise _syntax(json.JSONDecodeError("Extra data", text, _skip(text, end)))
    return value


def loads_members(
    data: bytes | bytearray | str,
    *,
    member: str,
    max_items: int,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """``loads`` of a document, but when it is an object whose ``member`` is an array,
    that array is read one element at a time and refused (``TooManyItems``) at its
    ``max_items + 1``-th element, before the rest is decoded. Any other document is
    decoded as ``loads`` does (the caller refuses its shape). The bytes are let go of as
    soon as they are text: a caller that passes its only reference keeps one copy."""
    text = _text(data)
    del data
    suspect = _SUSPECT.search(text) is not None
    at = _skip(text, 0)
    if not text.startswith("{", at):
        return loads(text, max_depth=max_depth)
    result: dict[str, Any] = {}
    at = _skip(text, at + 1)
    if text.startswith("}", at):
        at += 1
    else:
        while True:
            _expect(text, at, '"', "property name enclosed in double quotes")
            key, at = _value_at(text, at, max_depth, suspect, 1)
            if key in result:
                raise JsonRefused(
                    "duplicate-key", f"the key {_shown(key)} appears twice in an object"
                )
            at = _skip(text, at)
            _expect(text, at, ":", "':' delimiter")
            at = _skip(text, at + 1)
            if key == member and text.startswith("[", at):
                result[key], at = _array(text, at, member, max_items, max_depth, suspect)
            else:
                result[key], at = _value_at(text, at, max_depth, suspect, 1)
            at = _skip(text, at)
            if _expect(text, at, ",}", "',' delimiter") == "}":
                at += 1
                break
            at = _skip(text, at + 1)
    if _skip(text, at) != len(text):
        raise _syntax(json.JSONDecodeError("Extra data", text, _skip(text, at)))
    return result


def _array(
    text: str, at: int, member: str, max_items: int, max_depth: int, suspect: bool
) -> tuple[list[Any], int]:
    items: list[Any] = []
    at = _skip(text, at + 1)
    if text.startswith("]", at):
        return items, at + 1
    while True:
        if len(items) == max_items:
            raise TooManyItems(member, max_items)
        item, at = _value_at(text, at, max_depth, suspect, 2)
        items.append(item)
        # The blanks, the comma or bracket and the blanks after it in one match (three
        # calls per element were half of what reading a batch cost beyond the scanner).
        after = _AFTER_ITEM.match(text, at)
        if after is None:
            raise _syntax(json.JSONDecodeError("Expecting ',' delimiter", text, _skip(text, at)))
        if after[1] == "]":
            return items, after.end(1)
        at = after.end()
