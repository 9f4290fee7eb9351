"""The ``pigeon`` command. Each command group lives in its own module and registers here.

Every error a user can cause ends in a one-line message and a non-zero exit, never a
traceback: usage errors are typer's (exit 2); what a command meets at run time — pigeon's
own errors, the database driver's, the file system's — is caught once, here, for every
command, and printed as ``error: <message>`` (shown escaped) with exit status 1.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from pigeon.exceptions import PigeonError
from pigeon.storage.errors import is_driver_error


def _user_error(exc: Exception) -> bool:
    """Is ``exc`` one a user can cause (a bad file, an unreachable or full database, a
    refused value), as opposed to a bug in pigeon, which keeps its traceback?"""
    if isinstance(exc, PigeonError) or is_driver_error(exc):
        return True
    if isinstance(exc, OSError):
        return not isinstance(exc, BrokenPipeError)  # click ends a closed pipe quietly
    return False


class _Group(TyperGroup):
    # ctx: typer's own (vendored) click Context, which it does not export; Any keeps the
    # override compatible without importing a private module.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if not _user_error(exc):
                raise
            from pigeon.cli._format import error

            error(exc)
            raise typer.Exit(1) from exc


app = typer.Typer(
    name="pigeon",
    help="What a user did is never lost and never done twice.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Group,
)


def _register() -> None:
    # Imported here so that `import pigeon` stays free of CLI dependencies.
    from pigeon.cli import demo_cmd, queue_cmd

    app.command("demo")(demo_cmd.demo)

    app.add_typer(queue_cmd.app, name="queue")
    from pigeon.cli import serve_cmd

    app.command("serve")(serve_cmd.serve)
    from pigeon.cli import jobs_cmd, plan_cmd, worker_cmd

    app.add_typer(jobs_cmd.app, name="jobs")
    app.command("worker")(worker_cmd.worker)
    app.command("plan")(plan_cmd.plan)
    from pigeon.cli import conflicts_cmd

    app.add_typer(conflicts_cmd.app, name="conflicts")
    from pigeon.cli import bench_cmd

    app.command("bench")(bench_cmd.bench)
    from pigeon.cli import relay_cmd

    app.command("relay")(relay_cmd.relay)
    from pigeon.cli import keys_cmd

    app.add_typer(keys_cmd.app, name="keys")


_register()


def main() -> None:
    app()
