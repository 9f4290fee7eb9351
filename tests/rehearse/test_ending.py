"""A rehearsal's processes end with it: SIGTERMed, it stops them and drops the database it
made; SIGKILLed, they end by themselves (`pigeon.orphans`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from tests.rehearse.cli import ROOT

pytestmark = pytest.mark.slow


def _children(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (the run's database path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _start(db: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "pigeon", "rehearse", "--db", str(db), "--scenario", "peak"]
    # Its folder of logs too goes under the test's own: a SIGKILLed run cannot remove it.
    env = os.environ | {"TMPDIR": str(db.parent)}
    proc = processes.spawn(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while len(_children(str(db))) < 3:  # the rehearsal, its server and its workers
        assert time.monotonic() < deadline and proc.poll() is None, "the run did not start"
        time.sleep(0.2)
    return proc


def _gone(marker: str, timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _children(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:  # the test's own cleanup: none may outlive it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_its_processes_end_with_it(tmp_path: Path, sig: signal.Signals) -> None:
    db = tmp_path / "rehearsal.db"
    proc = _start(db)
    os.kill(proc.pid, sig)  # the rehearsal alone, not its group
    proc.wait(60)
    assert _gone(str(db)) == []
    if sig == signal.SIGTERM:
        assert not db.exists()  # made for the run, dropped on the way out
        assert not list(tmp_path.glob("pigeon-rehearse-*"))  # and its folder of logs
