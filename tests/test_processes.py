"""No process a test starts outlives the run (tests/processes.py): a pytest run interrupted
by SIGINT or SIGTERM leaves none of its groups behind, a group left running by a test body
ends with that test's call, and no test starts a process except through the helper."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pigeon.rehearse.children import Children
from tests import processes

TESTS = Path(__file__).parent
ROOT = TESTS.parent

# A child that starts a grandchild in its own group and reports both pids, then waits.
FAMILY = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1], "a") as out:
    out.write(f"{sys.argv[2]} {os.getpid()} {grandchild.pid}\\n")
time.sleep(600)
"""

INNER = """
import os, sys, time
from pathlib import Path

import pytest

from pigeon.rehearse.children import Children
from tests import processes

PIDS = Path(os.environ["PIGEON_TEST_PIDS"])
FAMILY = {family!r}
left: list[int] = []


def family(tag: str) -> int:
    proc = processes.spawn([sys.executable, "-c", FAMILY, str(PIDS), tag])
    while tag not in (PIDS.read_text() if PIDS.exists() else ""):
        time.sleep(0.02)
    return proc.pid


@pytest.fixture(scope="session")
def forgotten() -> int:
    return family("fixture")  # never stopped by the fixture: the session's end must


def test_a_body_leaves_a_family(forgotten: int) -> None:
    left.append(family("body"))


def test_the_body_s_family_is_gone_when_its_call_ended() -> None:
    (group,) = left
    assert group not in processes.recorded()  # the outer test checks its members are gone


def test_hangs_until_interrupted(forgotten: int) -> None:
    family("hung")
    if os.environ.get("PIGEON_TEST_HANG"):
        time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie left for an init that never reaps it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _inner_pytest(tmp_path: Path, hang: bool) -> tuple[subprocess.Popen[str], Path]:
    test = tmp_path / "inner" / "test_inner.py"
    test.parent.mkdir()
    test.write_text(INNER.format(family=FAMILY))
    pids = tmp_path / "pids"
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PIGEON_TEST_PIDS": str(pids),
        "PIGEON_TEST_HANG": "1" if hang else "",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # a quicker start: only the helper is needed
    }
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.processes"]
    proc = processes.spawn(
        [sys.executable, *args, "--rootdir", str(test.parent), str(test)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, pids


def _families(pids: Path) -> dict[str, list[int]]:
    lines = pids.read_text().splitlines() if pids.exists() else []
    return {tag: [int(p) for p in rest] for tag, *rest in (line.split() for line in lines)}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_leaves_no_process(tmp_path: Path, sig: signal.Signals) -> None:
    proc, pids = _inner_pytest(tmp_path, hang=True)
    deadline = time.monotonic() + 60
    while "hung" not in _families(pids):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the inner run never got to its hanging test"
        time.sleep(0.05)
    families = _families(pids)
    assert all(_alive(pid) for pid in families["hung"] + families["fixture"])
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=60)
    assert "Interrupted" in output or "KeyboardInterrupt" in output, output
    deadline = time.monotonic() + 15  # killed at once; reaped within seconds under load
    while any(_alive(pid) for family in families.values() for pid in family):
        assert time.monotonic() < deadline, (families, output)
        time.sleep(0.05)


def test_a_group_left_by_a_test_body_ends_with_its_call(tmp_path: Path) -> None:
    proc, pids = _inner_pytest(tmp_path, hang=False)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    assert "3 passed" in output, output
    assert not any(_alive(pid) for family in _families(pids).values() for pid in family)


# What starts a process, by module; only tests/processes.py may call them.
FORBIDDEN = {
    "subprocess": {
        "Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput",
    },
    "os": {
        "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnl",
        "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
    },
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "multiprocessing": {"Process"},
    "pty": {"fork", "spawn"},
    "pigeon.demo.processes": {"ServerProcess"},  # tests.processes.ServerProcess records it
}  # fmt: skip
# Children that do one write and _exit (they test what fork itself does to pigeon's ids and nonces),
# and multiprocessing children made daemonic (multiprocessing terminates them at exit).
ALLOWED = {
    ("server/test_idempotency.py", "os.fork"),
    ("core/test_ids.py", "os.fork"),
    ("storage/test_crypto.py", "os.fork"),
    ("storage/test_sqlite_open.py", "context.Process"),
}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def _process_starts(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in FORBIDDEN:
            names = FORBIDDEN[node.module]
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name in names]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = _dotted(node.func)
            module = name.rpartition(".")[0]
            # a multiprocessing context's Process too, whatever it is called
            if node.func.attr in FORBIDDEN.get(module, ()) or node.func.attr == "Process":
                found.append(name)
    return found


def test_no_test_starts_a_process_but_through_the_helper() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS).as_posix()
        if relative == "processes.py" or "previous" in path.parts:
            continue
        for name in _process_starts(ast.parse(path.read_text(), str(path))):
            if (relative, name) not in ALLOWED:
                offenders.append(f"{relative}: {name}")
    assert offenders == [], "start processes with tests.processes.spawn / run:\n" + "\n".join(
        offenders
    )


def test_the_policy_sees_each_way_of_starting_a_process() -> None:
    source = textwrap.dedent(
        """
        import subprocess, os, asyncio, multiprocessing
        from subprocess import Popen
        from pigeon.demo.processes import ServerProcess
        subprocess.Popen(["x"]); subprocess.run(["x"]); os.system("x"); os.fork()
        asyncio.create_subprocess_exec("x"); multiprocessing.Process(target=print)
        """
    )
    assert len(_process_starts(ast.parse(source))) == 8


def test_the_pipes_of_an_ended_process_are_closed_and_a_live_ones_kept() -> None:
    ended = processes.spawn([sys.executable, "-c", "print(1)"], stdout=subprocess.PIPE)
    live = processes.spawn([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    try:
        ended.wait(30)
        processes.close_pipes()
        assert ended.stdout is not None and ended.stdout.closed
        assert live.stdin is not None and not live.stdin.closed
    finally:
        processes.stop(live, grace=0)
    processes.close_pipes()
    assert live.stdin.closed


def test_the_servers_and_children_of_pigeon_close_the_pipes_of_what_they_ended(
    tmp_path: Path,
) -> None:
    """pigeon's own process owners (the demo's server, a rehearsal's children) close an
    ended process's pipe themselves: a test running them in-process leaks nothing."""
    children = Children(tmp_path)
    child = children.spawn([sys.executable, "-c", "print(1)"], "c.log", {}, stdout=subprocess.PIPE)
    children.end(child, grace=0)
    assert child.stdout is not None and child.stdout.closed
    server = processes.ServerProcess(tmp_path / "server.db")
    server._proc = processes.spawn([sys.executable, "-c", "print(1)"], stdout=subprocess.PIPE)
    server._proc.wait(30)
    server.stop()
    assert server._proc.stdout is not None and server._proc.stdout.closed
