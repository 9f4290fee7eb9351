"""Every numeric option with a range declares it in its type (``typer.Option(min=...)``,
``Finite(min=..., max=...)``), so it is refused as a usage error (exit 2, naming the
option and the range) before the command does anything, and ``--help`` shows the range.
A check written in the command's body answered in words of its own, after other options
had been looked at, and only where someone remembered to write it; the options are found
by walking the app, so an option added later is held to this too."""

from __future__ import annotations

import pytest
from typer._click.types import IntParamType
from typer.core import TyperOption
from typer.testing import CliRunner

from pigeon.cli import app

from .commands import walk

# Whole-number options that take any value, and why.
UNBOUNDED_INTS = {
    ("demo", "--seed"),  # any seed
}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, " ".join(result.output.replace("│", " ").split())


def _int_options() -> list[tuple[tuple[str, ...], TyperOption]]:
    return [
        (path, param)
        for path, command in walk()
        for param in command.params
        if isinstance(param, TyperOption) and isinstance(param.type, IntParamType)
    ]


INT_OPTIONS = _int_options()


def test_the_walk_finds_the_whole_number_options() -> None:
    assert len(INT_OPTIONS) >= 20


@pytest.mark.parametrize(
    ("path", "option"), INT_OPTIONS, ids=[" ".join((*p, o.opts[0])) for p, o in INT_OPTIONS]
)
def test_every_whole_number_option_declares_its_lower_bound(
    path: tuple[str, ...], option: TyperOption
) -> None:
    if (*path, option.opts[0]) in UNBOUNDED_INTS:
        return
    assert getattr(option.type, "min", None) is not None, f"pigeon {' '.join(path)}"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["worker", "--processes", "0"], "0 is not in the range x>=1"),
        (["worker", "--recycle-jobs", "0"], "0 is not in the range x>=1"),
        (["worker", "--recycle-mib", "0"], "0.0 is not in the range x>0"),
        (["worker", "--batch", "0"], "0 is not in the range x>=1"),
        (["worker", "--prefetch", "-2"], "-2 is not in the range x>=1"),
        (["demo", "--fault-rate", "0.3"], "0.3 is not in the range 0.0<=x<=0.25"),
        (["demo", "--fault-rate", "-0.1"], "-0.1 is not in the range 0.0<=x<=0.25"),
        (["plan", "--backlog", "-1"], "-1 is not in the range x>=0"),
        (["plan", "--arrival-rate", "-1"], "-1.0 is not in the range x>=0"),
        (["plan", "--target", "0"], "0.0 is not in the range x>0"),
        (["plan", "--service-time", "0"], "0.0 is not in the range x>0"),
        (["plan", "--memory-per-worker", "-3"], "-3.0 is not in the range x>=0"),
        (["jobs", "purge", "--older-than", "0"], "0.0 is not in the range x>0"),
        (["jobs", "purge", "--batch", "0"], "0 is not in the range x>=1"),
        (["queue", "purge", "--older-than", "-1"], "-1.0 is not in the range x>=0"),
    ],
)
def test_a_value_out_of_range_is_a_usage_error_naming_the_option(
    args: list[str], words: str
) -> None:
    # Given first, the option is converted before any other is looked at (a required one
    # left out cannot answer instead).
    code, output = _run(*args)
    assert code == 2 and f"Invalid value for '{args[-2]}': {words}" in output, output


def test_the_help_shows_the_range() -> None:
    code, output = _run("worker", "--help")
    assert code == 0 and "<float> [x>0]" in output and "[x>=1]" in output, output
