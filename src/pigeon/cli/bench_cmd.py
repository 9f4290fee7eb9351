"""``pigeon bench``: the benchmarks of a source checkout, each beside its baseline.

The benchmarks live in the repository's ``bench/`` folder, not in the installed package
(they need the peers they are measured against: persist-queue, huey, procrastinate), so
this command runs the ``bench`` package of the checkout it is started in, as
``python -m bench`` does.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated

import typer


def bench(
    quick: Annotated[bool, typer.Option(help="Smaller sizes, about a minute.")] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(help="Only this benchmark module (e.g. e2e, edge); repeatable."),
    ] = None,
    json: Annotated[Path | None, typer.Option(help="Also write the rows to this file.")] = None,
) -> None:
    """Run the benchmarks (bench/ of the checkout in the current folder); exit 1 if a
    target is missed."""
    root = Path.cwd()
    if not (root / "bench" / "__main__.py").is_file():
        raise typer.BadParameter(
            f"no bench/ folder in {root}: run it from the root of a pigeon source checkout "
            "(the benchmarks are not installed with the package)",
            param_hint="the current folder",
        )
    sys.path.insert(0, str(root))
    runner = importlib.import_module("bench.__main__")
    argv = ["--quick"] if quick else []
    for name in only or ():
        argv += ["--only", name]
    if json is not None:
        argv += ["--json", str(json)]
    raise typer.Exit(runner.main(argv))
