"""`pigeon conflicts list | show | resolve` on a real queue file with a held conflict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.core.operation import OpStatus
from pigeon.edge.conflicts import ConflictStore
from pigeon.edge.queue import OfflineQueue

runner = CliRunner()


@pytest.fixture
def held(tmp_path: Path) -> tuple[Path, int, str]:
    """A queue whose update of note:1 came back 412 and is held for the user."""
    path = tmp_path / "queue.db"
    with OfflineQueue(path) as queue:
        store = ConflictStore(queue)
        store.remember("note:1", "1", {"body": "v1"})
        op = queue.enqueue("update", "note:1", {"body": "mine"}, base_version="1")
        [sent] = queue.next_batch()
        queue.mark_failed(sent.id, "HTTP 412", kind="conflict")
        conflict = store.record(
            queue.get(op.id),
            "held",
            strategy="user",
            base={"body": "v1"},
            local={"body": "mine"},
            remote={"body": "theirs"},
            remote_version="2",
        )
    return path, conflict, op.id


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["conflicts", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_list_and_show(held: tuple[Path, int, str]) -> None:
    path, conflict, _ = held
    code, output = run("list", "-f", str(path))
    assert code == 0 and "note:1" in output and "held" in output and "theirs" in output
    code, output = run("show", "-f", str(path), str(conflict))
    assert code == 0 and '"mine"' in output and "remote_version" in output
    code, output = run("show", "-f", str(path), "999")
    assert code == 1 and "no conflict 999" in output


def test_resolve_with_a_merged_file_enqueues_a_new_operation(
    held: tuple[Path, int, str], tmp_path: Path
) -> None:
    path, conflict, op_id = held
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps({"body": "mine and theirs"}))
    code, output = run("resolve", "-f", str(path), str(conflict), "--merged", str(merged))
    assert code == 0 and "queued against version 2" in output
    with OfflineQueue(path) as queue:
        [new] = queue.pending
        assert new.payload == {"body": "mine and theirs"} and new.base_version == "2"
        assert new.id != op_id and new.status is OpStatus.PENDING
        assert ConflictStore(queue).get(conflict).resolution == "merged"
    code, output = run("resolve", "-f", str(path), str(conflict), "--keep", "local")
    assert code == 1 and "not held" in output
    code, output = run("list", "-f", str(path), "--all")
    assert code == 0 and "resolved" in output


def test_resolve_refuses_bad_choices(held: tuple[Path, int, str], tmp_path: Path) -> None:
    path, conflict, _ = held
    assert run("resolve", "-f", str(path), str(conflict))[0] == 2
    code, output = run("resolve", "-f", str(path), str(conflict), "--keep", "mine")
    assert code == 2 and "local, remote or both" in output
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, output = run("resolve", "-f", str(path), str(conflict), "--merged", str(broken))
    assert code == 2 and "cannot read" in output
    code, output = run("resolve", "-f", str(path), str(conflict), "--keep", "remote")
    assert code == 0 and "nothing to send" in output
