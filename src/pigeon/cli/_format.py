"""How the CLI writes to a terminal: seconds, and strings it did not make itself.

Entity names, payloads, errors, principals, queue and task names come from users, apps and
servers. Written raw, ``note:\\x1b[2J`` clears the operator's screen, an OSC sequence can
retitle the window or plant a hyperlink, and ``[red]...`` or ``:smile:`` are read by rich
as markup and emoji. Every command prints such strings through `shown` and its consoles
come from `console` (no emoji codes), so none of them reaches the terminal as anything but
visible text.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# C0 controls (ESC among them), DEL, C1 controls (0x9b is a one-byte CSI on some
# terminals), the Unicode line/paragraph separators and the bidirectional overrides and
# isolates, which reorder what is shown around them ("Trojan Source").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MULTILINE_KEEP = frozenset("\n\t")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: Any, *, multiline: bool = False) -> str:
    """``value`` as text safe to hand to rich: every control character written as a
    visible escape (``\\x1b``; newlines and tabs kept only with ``multiline``), then rich's
    markup escaping, so ``[red]`` prints as ``[red]``. None is the empty string."""

    def replace(match: re.Match[str]) -> str:
        char = match.group()
        return char if multiline and char in _MULTILINE_KEEP else _visible(char)

    return markup_escaped(_CONTROL.sub(replace, "" if value is None else str(value)))


# rich.markup.escape's pattern, r"(\\*)(\[[a-z#/@][^[]*?])", tries every backslash of a run
# and backtracks over the rest of it: quadratic (32,000 backslashes in a job's error took
# 9 s). The same escaping, linear: a run is taken at its start only, and whole.
_MARKUP = re.compile(r"(?<!\\)(\\*+)(\[[a-z#/@][^[]*?\])")


def markup_escaped(text: str) -> str:
    """``text`` escaped for rich as ``rich.markup.escape`` escapes it, in linear time."""
    escaped = _MARKUP.sub(lambda m: f"{m[1]}{m[1]}\\{m[2]}", text)
    if escaped.endswith("\\") and not escaped.endswith("\\\\"):
        return escaped + "\\"
    return escaped


def one_line(message: Any) -> str:
    """An error message as one shown line: its lines joined (a driver's message may span
    several), then `shown`."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return shown("; ".join(lines))


def console(*, stderr: bool = False) -> Console:
    """A console for a command's output: emoji codes off, as rich would otherwise turn
    ``:smile:`` in a user's string into a picture (markup is escaped by `shown`)."""
    return Console(stderr=stderr, emoji=False)


def error(message: Any) -> None:
    """``error: <message>`` on stderr as one line (`one_line`; not wrapped at the
    terminal's width, so a script reading it gets the line whole), credentials hidden."""
    from pigeon.cli.secrets import scrub

    console(stderr=True).print(
        f"[red]error:[/red] {one_line(scrub(str(message)))}", highlight=False, soft_wrap=True
    )


def duration(seconds: float | None, *, switch: float = 1.0) -> str:
    """``seconds`` in the largest unit of d/h/m it reaches ``switch`` times ("1.5h", or
    with ``switch=2`` "90.0m" until two hours), else in seconds; "-" for None."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= switch * size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def titled_table(title: str, **options: Any) -> Table:
    """A rich ``Table`` at least as wide as its title. Rich wraps a title to its table's
    width, so a narrow table broke a title holding a file path or a count across lines,
    where it could be neither read nor copied whole (the console's width still caps it).
    The width is the title as shown: markup and its escapes take no cell, a wide
    character takes two."""
    return Table(title=title, min_width=Text.from_markup(title).cell_len, **options)
