"""`pigeon demo --conflicts`: every strategy does what the table says, in a few seconds."""

from __future__ import annotations

from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.demo.conflicts import run_conflicts_demo
from pigeon.edge.merge import SEPARATOR


def test_each_strategy_leaves_the_server_in_the_state_it_promises() -> None:
    rows = {row.entity: row for row in run_conflicts_demo()}
    assert rows["card:groceries"].server == {"title": "Food", "colour": "red", "done": True}
    assert rows["note:ideas"].server == {"body": f"a garden, a pond{SEPARATOR}a garden, bees"}
    assert rows["draft:letter"].server == {"body": "Hi Ann,"}
    assert "conflicted-copy" in rows["draft:letter"].outcome
    assert rows["lww-note:status"].server == {"text": "at work"}
    assert "lost" in rows["lww-note:status"].outcome
    assert sorted(rows["doc:plan"].server.split()) == ["plan:", "seeds", "shed"]


def test_the_cli_prints_the_table() -> None:
    result = CliRunner().invoke(app, ["demo", "--conflicts"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    assert "what each strategy did" in result.output and "last write wins" in result.output
