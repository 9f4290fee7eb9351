"""``--help`` of every command and subcommand (walked from the typer app) exits 0, shows
no traceback, and shows each help text as written: typer renders help with rich markup,
so a ``[/db]`` in a URL pattern was a closing tag (a MarkupError traceback for ``pigeon
relay --help``) and ``[user:password@]`` a style that silently vanished."""

from __future__ import annotations

import re

import click
import pytest
from rich.text import Text
from typer.testing import CliRunner

from pigeon.cli import app

from .commands import every_command, walk


def _texts(command: click.Command) -> list[tuple[str, str]]:
    texts = [("help", command.help or ""), ("short help", command.short_help or "")]
    texts += [(param.name or "?", getattr(param, "help", None) or "") for param in command.params]
    return [(name, text) for name, text in texts if text]


@pytest.mark.parametrize("path", every_command(), ids=" ".join)
def test_every_help_exits_0_without_a_traceback(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "Usage:" in result.output


def test_every_help_text_survives_rich_markup() -> None:
    """Each help text, read as rich markup (as typer shows it), is the text as written,
    its escapes aside: no tag is taken from it, no text dropped, no MarkupError."""
    checked = 0
    for path, command in walk():
        for name, text in _texts(command):
            try:
                plain = Text.from_markup(text).plain
            except Exception as exc:  # rich.errors.MarkupError
                pytest.fail(f"pigeon {' '.join(path)}: help of {name}: {exc}")
            unescaped = re.sub(r"\\(\[)", r"\1", text)
            assert plain == unescaped, f"pigeon {' '.join(path)}: help of {name} loses text"
            checked += 1
    assert checked > 100  # the walk found the commands' options


def test_the_relay_help_shows_the_url_patterns() -> None:
    result = CliRunner().invoke(app, ["relay", "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "redis://host[:port][/db]" in result.output
    assert "amqp://user:pass@host[:port][/vhost]" in result.output
