"""The options serve and worker (and the keys and jobs commands) share are declared once,
in pigeon.cli.options: the commands take the very same annotation, so their flag names and
help cannot drift apart."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pigeon.cli import app, jobs_cmd, keys_cmd, options, serve_cmd, worker_cmd

SHARED = {
    "db": options.DbOption,
    "keys_file": options.KeysFileOption,
    "log_format": options.LogFormatOption,
    "log_redact": options.LogRedactOption,
    "relay_to": options.RelayToOption,
}


@pytest.mark.parametrize("command", [serve_cmd.serve, worker_cmd.worker])
def test_serve_and_worker_take_the_shared_declarations(command: typing.Any) -> None:
    hints = typing.get_type_hints(command, include_extras=True)
    for name, declared in SHARED.items():
        assert hints[name] == declared, name


def test_no_command_module_spells_a_shared_flag_itself() -> None:
    flags = ("--db", "--keys-file", "--log-format", "--log-redact", "--relay-to")
    for module in (serve_cmd, worker_cmd, keys_cmd, jobs_cmd):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        spelled = {
            arg.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "Option"
            for arg in node.args
            if isinstance(arg, ast.Constant) and arg.value in flags
        }
        assert not spelled, f"{module.__name__} declares {spelled} itself: use pigeon.cli.options"


def _option_help(command: str, flag: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # rich's help panel: the flag's row, and the rows wrapped under it until the next flag
    text = re.sub(r"[│╭╰─╮╯]", " ", result.output)
    block = text.split(flag, 1)[1]
    return " ".join(re.split(r"\n\s+--", block, maxsplit=1)[0].split())


@pytest.mark.parametrize("flag", ["--relay-to", "--log-format", "--log-redact", "--keys-file"])
def test_the_help_is_the_same_in_both_commands(flag: str) -> None:
    shown = _option_help("serve", flag)
    assert len(shown) > 20 and shown == _option_help("worker", flag)
