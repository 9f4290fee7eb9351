"""Every command and subcommand of the ``pigeon`` app, found by walking typer's click
tree (not a hand-written list): a command added later is covered by the tests that
iterate over them without anyone remembering to add it."""

from __future__ import annotations

from collections.abc import Iterator

import click
import typer

from pigeon.cli import app


def walk(
    command: click.Command | None = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """(the words that name it, the command) for the app and everything under it."""
    command = command or typer.main.get_command(app)
    yield path, command
    if hasattr(command, "list_commands"):  # a group (typer's own click, or click's)
        context = type(command).context_class(command)
        for name in sorted(command.list_commands(context)):
            sub = command.get_command(context, name)
            assert sub is not None, name
            yield from walk(sub, (*path, name))


def every_command() -> list[tuple[str, ...]]:
    return [path for path, _ in walk()]


def leaves() -> list[tuple[tuple[str, ...], click.Command]]:
    """The commands that run something (not a group)."""
    return [(path, cmd) for path, cmd in walk() if not hasattr(cmd, "list_commands")]
