"""The ``pigeon`` command. Each command group lives in its own module and registers here."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="pigeon",
    help="What a user did is never lost and never done twice.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


_register()


def main() -> None:
    app()
