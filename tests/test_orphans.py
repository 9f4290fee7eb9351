"""pigeon.orphans: a child pigeon starts ends with its parent, SIGKILLed or not, whether the
kernel's death signal was asked for (a child started from the main thread) or only the
parent check runs (a child started from a passing thread, which must not be killed when
that thread ends)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from tests.waiting import answers, wait_for

# Starts the demo's pigeon serve (from the main thread or a passing one), says its pid and
# URL, then waits to be killed.
PARENT = """
import sys, threading, time
from pigeon.demo.processes import ServerProcess
server = ServerProcess(sys.argv[1], allow_anonymous=True)
if sys.argv[2] == "thread":
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
else:
    server.start()
print(server._proc.pid, server.url, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("started_from", ["main", "thread"])
def test_the_demo_server_ends_with_its_sigkilled_parent(tmp_path: Path, started_from: str) -> None:
    parent = processes.spawn(
        [sys.executable, "-c", PARENT, str(tmp_path / "server.db"), started_from],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pid, url = parent.stdout.readline().split()
    time.sleep(1.5)  # a death signal tied to the finished starter thread would have come
    assert _alive(int(pid)) and answers(url + "/pigeon/v1/health")
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(10)
    wait_for(lambda: not _alive(int(pid)), 10, "pigeon serve to end with its parent", 0.05)
    assert not answers(url + "/pigeon/v1/health")


def test_a_child_whose_parent_died_before_it_asked_ends_at_once() -> None:
    """The race the check closes: re-parented before prctl, no signal would ever come."""
    code = (
        "import os, time; from pigeon.orphans import die_with_parent; "
        "die_with_parent(os.getppid() + 1_000_000); time.sleep(5); print('survived')"
    )
    done = processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM and "survived" not in done.stdout
    assert "is gone" in done.stderr
