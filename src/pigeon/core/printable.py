"""What pigeon calls printable text: one rule, as a predicate for the server's checks and
as a regular expression class for the published contract (``pigeon.server.contract``).

Refused are the characters of the Basic Multilingual Plane in the Unicode categories Cc
(controls), Cf (format: the bidi controls, zero-width joiners, the BOM), Cs (surrogates),
Co (private use), Zl, Zp and Zs (separators; the ASCII space excepted), and its
noncharacters, as of Unicode 14.0. The table is frozen here, so that the rule, and the
OpenAPI document that publishes it, do not move with the interpreter's Unicode tables;
and it names no character beyond U+FFFF, because a pattern class naming any made every
generator of test data we tried (hypothesis, schemathesis) take seconds per value. So
the unassigned code points and the characters above U+FFFF (emoji, rarer scripts, and
also the tag characters and the supplementary private-use planes) are taken as they
come. Every character refused here is one ``str.isprintable`` refuses too
(tests/server/test_contract_rules.py).
"""

from __future__ import annotations

import re

UNICODE_VERSION = "14.0.0"
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp", "Zs"})

# Hexadecimal code point ranges (first-last, or one code point) of what is NOT printable.
_NOT_PRINTABLE = """
0-1F 7F-A0 AD 600-605 61C 6DD 70F 890-891 8E2 1680 180E 2000-200F 2028-202F
205F-2064 2066-206F 3000 D800-F8FF FDD0-FDEF FEFF FFF9-FFFB FFFE-FFFF
"""


def _ranges() -> list[tuple[int, int]]:
    out = []
    for item in _NOT_PRINTABLE.split():
        first, _, last = item.partition("-")
        out.append((int(first, 16), int(last or first, 16)))
    return out


NOT_PRINTABLE_RANGES: tuple[tuple[int, int], ...] = tuple(_ranges())


def _char(code: int) -> str:
    # \uXXXX in the BMP (Python's re, Rust's regex and ECMA-262 read it alike), the
    # character itself above it (ECMA-262 has no \U escape).
    return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)


def _class(ranges: list[tuple[int, int]]) -> str:
    return "".join(
        _char(first) if first == last else f"{_char(first)}-{_char(last)}" for first, last in ranges
    )


def _without_surrogates(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """JSON Schema validators compile a pattern as Unicode scalar values; a lone surrogate
    is in no JSON text pigeon decodes and in no UTF-8 path (both refused before any
    pattern runs)."""
    out = []
    for first, last in ranges:
        if first < 0xD800:
            out.append((first, min(last, 0xD7FF)))
        if last > 0xDFFF:
            out.append((max(first, 0xE000), last))
    return out


# The inside of a regular expression class of the characters that are not printable.
NOT_PRINTABLE_CLASS = _class(_without_surrogates(NOT_PRINTABLE_RANGES))
_REFUSED = re.compile(f"[{_class(list(NOT_PRINTABLE_RANGES))}]")


def printable(text: str) -> bool:
    """Every character of ``text`` printable (the empty string is)."""
    if text.isascii():  # nearly every value; ASCII's classes never change
        return text.isprintable()
    return _REFUSED.search(text) is None
