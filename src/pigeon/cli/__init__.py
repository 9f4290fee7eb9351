"""The ``pigeon`` command. Each command group lives in its own module and registers here.

Every error a user can cause ends in a one-line message and a non-zero exit, never a
traceback: usage errors are typer's (exit 2); what a command meets at run time — pigeon's
own errors, the database driver's, the file system's — is caught once, here, for every
command, and printed as ``error: <message>`` (shown escaped) with exit status 1.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

import typer
from typer.core import TyperGroup

from pigeon.exceptions import MissingExtra, PigeonError
from pigeon.extras import extra_of
from pigeon.orphans import adopt_parent_from_env
from pigeon.storage.errors import is_driver_error


def _user_error(exc: Exception) -> bool:
    """Is ``exc`` one a user can cause (a bad file, an unreachable or full database, a
    refused value), as opposed to a bug in pigeon, which keeps its traceback?"""
    if isinstance(exc, PigeonError) or is_driver_error(exc):
        return True
    if isinstance(exc, OSError):
        return not isinstance(exc, BrokenPipeError)  # click ends a closed pipe quietly
    return False


# Each command: the module that defines it, the attribute (a function, or a Typer of
# subcommands) and the line `pigeon --help` shows. A command's module is imported when
# the command runs (or its own --help is asked for), so `pigeon --help` and the edge's
# `pigeon queue` load neither the server nor the reference app.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": (
        "pigeon.cli.demo_cmd",
        "demo",
        "Edit notes offline, sync through a faulty network, prove every edit landed once.",
    ),
    "serve": (
        "pigeon.cli.serve_cmd",
        "serve",
        "Serve an app with the idempotent intake: yours (--app) or the reference notes app.",
    ),
    "worker": (
        "pigeon.cli.worker_cmd",
        "worker",
        "Run jobs until SIGTERM (stop claiming; finish or release within the lease).",
    ),
    "rehearse": (
        "pigeon.cli.rehearse_cmd",
        "rehearse",
        "Run the failure list against an app on a throwaway database; exit 1 if any failed.",
    ),
    "plan": (
        "pigeon.cli.plan_cmd",
        "plan",
        "Ideal throughput, net drain and drain time per worker count; the minimum workers.",
    ),
    "bench": (
        "pigeon.cli.bench_cmd",
        "bench",
        "Run the benchmarks (bench/ of the checkout in the current folder); exit 1 if a "
        "target is missed.",
    ),
    "relay": (
        "pigeon.cli.relay_cmd",
        "relay",
        "Publish the outbox in order, marking each row only after the broker confirmed it.",
    ),
    "queue": ("pigeon.cli.queue_cmd", "app", "Inspect and repair an offline queue file."),
    "jobs": ("pigeon.cli.jobs_cmd", "app", "Inspect and repair server jobs."),
    "conflicts": (
        "pigeon.cli.conflicts_cmd",
        "app",
        "List, inspect and resolve conflicts of a queue.",
    ),
    "keys": ("pigeon.cli.keys_cmd", "app", "Encryption keys: generate, status, rotate."),
    "migrate": (
        "pigeon.cli.migrate_cmd",
        "migrate",
        "Create or upgrade pigeon's tables (pigeon_*) in an application's own database.",
    ),
}  # fmt: skip


def load_command(name: str) -> Any:
    """The click command ``name`` of `COMMANDS`, its module imported now (a command of
    typer's own click, whose types typer does not export: hence Any)."""
    module, attribute, _ = COMMANDS[name]
    try:
        target = getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as exc:
        extra = extra_of(exc.name or "")
        if extra is None:
            raise
        raise MissingExtra(
            f"pigeon {name} needs the {extra!r} extra: pip install 'pigeon[{extra}]' "
            f"(not installed: {exc.name})"
        ) from exc
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(rich_markup_mode=app.rich_markup_mode)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class _Group(TyperGroup):
    """The ``pigeon`` group: commands loaded on demand; one line for a user's error."""

    _listing = False  # while the group's own help is drawn: each command as its one line

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name][2])
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name)
        return self.commands[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    # ctx: typer's own (vendored) click Context, which it does not export; Any keeps the
    # override compatible without importing a private module.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as exc:
            _scrub(exc)
            raise
        except Exception as exc:
            if not _user_error(exc):
                raise
            from pigeon.cli._format import error

            error(exc)
            raise typer.Exit(1) from exc

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        # The top level's own parse (a subcommand's happens within invoke above).
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as exc:
            _scrub(exc)
            raise


def _scrub(exc: typer.TyperException) -> None:
    """A usage error as typer will print it, with no credential in it: its message may
    quote what was given (``no such database file: postgresql://user:PW@...``)."""
    from pigeon.cli.secrets import scrub

    exc.message = scrub(exc.message)


app = typer.Typer(
    name="pigeon",
    help="What a user did is never lost and never done twice.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Group,
)


@app.callback()
def _pigeon() -> None:
    # A callback makes typer build a group, whose commands `_Group` loads on demand.
    pass


def main() -> None:
    # Started by a pigeon process that named itself (pigeon.orphans.child_env, as the
    # demo's server is): end with it.
    adopt_parent_from_env()
    try:
        app()
    except Exception as exc:
        # A bug in pigeon keeps its traceback, but not a password its messages may quote
        # (a DSN in a driver's error): what Python would print, scrubbed, and its status.
        from pigeon.cli.secrets import scrub

        sys.stderr.write(scrub("".join(traceback.format_exception(exc))))
        sys.exit(1)
