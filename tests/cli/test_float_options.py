"""Every float option of every command refuses NaN and the infinities as a usage error
(exit 2, naming the option) before the command does anything. click's float types let
"nan" through any min/max (every comparison with NaN is false) and "inf" through any
minimum, so each command went on with them; the options are found by walking the app,
so an option added later is checked without anyone remembering to."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer._click.types import FloatParamType
from typer.core import TyperOption
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.cli.options import Finite
from pigeon.storage.server import open_server_db

from .commands import walk

# The float options the commands have today: the walk must find at least these, so the
# test cannot pass by finding none.
KNOWN = 22
NOT_FINITE = ["nan", "inf", "-inf", "NaN", "Infinity", "-Infinity"]


def _float_options() -> list[tuple[tuple[str, ...], TyperOption]]:
    """Each float option of each command (typer's own click, as the app is made of)."""
    found = []
    for path, command in walk():
        for param in command.params:
            if isinstance(param.type, FloatParamType):
                # A float argument would need its own invocation below: none exists yet.
                assert isinstance(param, TyperOption), f"pigeon {' '.join(path)}: {param.name}"
                found.append((path, param))
    return found


FLOAT_OPTIONS = _float_options()
IDS = [" ".join((*path, option.opts[0])) for path, option in FLOAT_OPTIONS]


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})
    assert "Traceback" not in result.output, result.output
    # rich's error box: unwrapped, its borders gone
    return result.exit_code, " ".join(result.output.replace("│", " ").split())


def test_the_walk_finds_every_float_option() -> None:
    assert len(FLOAT_OPTIONS) >= KNOWN, IDS


@pytest.mark.parametrize(("path", "option"), FLOAT_OPTIONS, ids=IDS)
@pytest.mark.parametrize("value", NOT_FINITE)
def test_every_float_option_refuses_nan_and_infinity(
    path: tuple[str, ...], option: TyperOption, value: str
) -> None:
    # Given first, the option is converted before any other is looked at (click processes
    # them in the order given): a required one left out cannot answer instead.
    flag = option.opts[0]
    code, output = _run(*path, flag, value)
    assert code == 2, output
    assert f"'{flag}'" in output and f"'{value}' is not a finite number" in output, output


@pytest.mark.parametrize(("path", "option"), FLOAT_OPTIONS, ids=IDS)
def test_every_float_option_is_finite_typed(path: tuple[str, ...], option: TyperOption) -> None:
    """The declaration, not just the behaviour: `typer.Option(click_type=Finite(...))`."""
    assert isinstance(option.type, Finite), f"pigeon {' '.join(path)} {option.opts[0]}"


def test_an_environment_variable_is_refused_too(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    code, output = _run("serve", "--db", str(db), env={"PIGEON_JWT_LEEWAY": "nan"})
    assert code == 2 and "'--jwt-leeway'" in output and "not a finite number" in output, output
    assert not db.exists()


@pytest.mark.parametrize(
    "args",
    [
        [
            "plan",
            "--backlog",
            "10",
            "--arrival-rate",
            "nan",
            "--target",
            "5",
            "--service-time",
            "1",
        ],
        [
            "plan",
            "--backlog",
            "10",
            "--arrival-rate",
            "1",
            "--target",
            "inf",
            "--service-time",
            "1",
        ],
        ["demo", "--operations", "5", "--timeout", "nan"],
        ["demo", "--operations", "5", "--fault-rate", "-inf"],
    ],
)
def test_a_whole_command_line_stops_at_the_non_finite_option(args: list[str]) -> None:
    code, output = _run(*args)
    assert code == 2 and "is not a finite number" in output, output


def test_relay_refuses_nan_on_a_real_database(tmp_path: Path) -> None:
    # --once on an empty outbox: taken, the NaN interval would have exited 0
    db = tmp_path / "server.db"
    open_server_db(db).close()
    args = ("--db", str(db), "--to", "redis://localhost", "--once", "--interval", "nan")
    code, output = _run("relay", *args)
    assert code == 2 and "'--interval'" in output and "not a finite number" in output, output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["relay", "--interval", "0.001"], "0.001 is not in the range x>=0.01"),
        (["queue", "stats", "--interval", "3601"], "3601.0 is not in the range 0.1<=x<=3600"),
        (["queue", "stats", "--interval", "0.05"], "0.05 is not in the range 0.1<=x<=3600"),
        (["serve", "--in-progress-wait", "-1"], "-1.0 is not in the range 0<=x<=30.0"),
        (["serve", "--drain-timeout", "-1"], "-1.0 is not in the range x>=0"),
        (["rehearse", "--rate", "0.01"], "0.01 is not in the range x>=0.1"),
        (["demo", "--timeout", "-1"], "-1.0 is not in the range x>=0.0"),
    ],
)
def test_the_bounds_of_a_float_option_still_hold(args: list[str], words: str) -> None:
    code, output = _run(*args)
    assert code == 2 and words in output, output


def test_a_finite_value_within_the_bounds_is_taken() -> None:
    bounded = Finite(min=0.1, max=3600)
    assert [bounded.convert(v, None, None) for v in ("0.1", "3600", 2, 1.5)] == [0.1, 3600, 2, 1.5]
    assert Finite().convert("-1e300", None, None) == -1e300


def test_the_help_shows_the_range_of_a_bounded_option_only() -> None:
    code, output = _run("queue", "stats", "--help")
    assert code == 0 and "<float> [0.1<=x<=3600]" in output, output
    code, output = _run("plan", "--help")
    assert code == 0 and "None" not in output and "<float>" in output, output
