"""`pigeon demo --conflicts`: every strategy does what the table says, in a few seconds."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.demo.conflicts import run_conflicts_demo
from pigeon.edge.merge import SEPARATOR


def test_each_strategy_leaves_the_server_in_the_state_it_promises() -> None:
    rows = {row.entity: row for row in run_conflicts_demo()}
    assert rows["card:groceries"].server == {"title": "Food", "colour": "red", "done": True}
    assert rows["note:ideas"].server == {"body": f"a garden, a pond{SEPARATOR}a garden, bees"}
    assert "rival texts kept and marked" in rows["note:ideas"].outcome  # not a silent merge
    assert rows["draft:letter"].server == {"body": "Hi Ann,"}
    assert "conflicted-copy" in rows["draft:letter"].outcome
    assert rows["lww-note:status"].server == {"text": "at work"}
    assert "lost" in rows["lww-note:status"].outcome
    assert sorted(rows["doc:plan"].server.split()) == ["plan:", "seeds", "shed"]


def test_the_cli_prints_the_table() -> None:
    result = CliRunner().invoke(app, ["demo", "--conflicts"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    assert "what each strategy did" in result.output and "last write wins" in result.output


def test_workdir_keeps_the_files_the_closing_line_points_to(tmp_path: Path) -> None:
    # The closing line sent the user to `pigeon conflicts list --all`, on queue files that
    # lived in a temporary folder already deleted.
    keep = tmp_path / "kept"
    result = CliRunner().invoke(
        app, ["demo", "--conflicts", "--workdir", str(keep)], env={"COLUMNS": "240"}
    )
    assert result.exit_code == 0, result.output
    assert (keep / "phone.db").exists() and (keep / "laptop.db").exists()
    listed = CliRunner().invoke(
        app, ["conflicts", "list", "--all", "-f", str(keep / "phone.db")], env={"COLUMNS": "240"}
    )
    assert listed.exit_code == 0, listed.output
    assert "draft:letter" in listed.output


def test_options_of_the_sync_demo_are_refused_with_conflicts() -> None:
    result = CliRunner().invoke(app, ["demo", "--conflicts", "--operations", "5", "--batch", "0"])
    assert result.exit_code == 2
    text = " ".join(result.output.replace("│", " ").split())
    assert "--operations, --batch do not apply to --conflicts" in text
    alone = CliRunner().invoke(app, ["demo", "--workdir", "x"])
    assert alone.exit_code == 2 and "only the --conflicts demo" in alone.output
