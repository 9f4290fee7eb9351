"""``--help`` of every command and subcommand (walked from the typer app) exits 0, shows
no traceback, and shows each help text as written: typer renders help with rich markup,
so a ``[/db]`` in a URL pattern was a closing tag (a MarkupError traceback for ``pigeon
relay --help``) and ``[user:password@]`` a style that silently vanished."""

from __future__ import annotations

import re
import sys

import click
import pytest
from rich.text import Text
from typer.testing import CliRunner

from pigeon.cli import app
from tests import processes

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


def test_the_commands_line_in_pigeon_help_is_each_commands_own() -> None:
    """`pigeon --help` lists each command by the line kept beside its module's name
    (so that it imports none of them); that line is the command's own short help."""
    from pigeon.cli import COMMANDS, load_command

    for name, (_, _, line) in COMMANDS.items():
        command = load_command(name)
        assert command.get_short_help_str(limit=200) == line, name


def test_pigeon_help_and_the_queue_commands_load_no_server_module() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from pigeon.cli import app\n"
        "for args in (['--help'], ['queue', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('pigeon.')}))\n"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'psycopg', 'jinja2', 'pycrdt', 'jwt')"
        " if m in sys.modules))\n"
    )
    out = processes.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "server" not in out[0] and "jobs" not in out[0] and "reference" not in out[0], out
    assert out[1] == "[]"
