"""A table's title is never broken across lines by the table's own narrowness."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from pigeon.cli._format import titled_table

TITLE = "/tmp/pytest-of-someone/pytest-9/popen-gw1/test_a_long_name0/phone.db: 1 conflict(s)"


def _rendered(table: Table, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue()


def _one_row(table: Table) -> Table:
    table.add_column("id")
    table.add_row("1")
    return table


def test_a_title_longer_than_the_table_stays_on_one_line() -> None:
    assert TITLE not in _rendered(_one_row(Table(title=TITLE)), 200)  # rich's own: wrapped
    assert TITLE in _rendered(_one_row(titled_table(TITLE)), 200)


def test_the_console_still_caps_the_width() -> None:
    lines = _rendered(_one_row(titled_table(TITLE)), 40).splitlines()
    assert max(len(line) for line in lines) <= 40


def test_the_width_is_the_title_as_shown() -> None:
    wide = "/tmp/\u7b14\u8bb0/phone.db: 1 conflict(s)"  # two CJK characters, two cells each
    escaped = "\\[red]alarm\\[/red] " + TITLE  # markup shown literally, as `shown` escapes it
    assert wide in _rendered(_one_row(titled_table(wide)), 200)
    assert "[red]alarm[/red] " + TITLE in _rendered(_one_row(titled_table(escaped)), 200)
    assert titled_table(escaped).min_width == len("[red]alarm[/red] " + TITLE)
