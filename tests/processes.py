"""Every process a test starts goes through here: in a process group of its own, recorded,
and killed with its whole group (its children too) however the run ends.

- ``spawn`` (for ``subprocess.Popen``) and ``run`` (for ``subprocess.run``) start the
  process in a new session and record its group; ``stop`` ends the group (SIGTERM, then
  SIGKILL) and forgets it. ``ServerProcess`` is the demo's ``pigeon serve`` recorded alike.
- A group a test body started and left running is killed when that test's call ends
  (``pytest_runtest_call``); whatever a fixture left is killed at the session's end
  (``pytest_sessionfinish``), at interpreter exit, and on SIGTERM or SIGHUP (turned into an
  interrupt, so that fixtures are torn down too). SIGINT is pytest's KeyboardInterrupt, which
  ends in ``pytest_sessionfinish`` as well.

tests/conftest.py imports the hooks; tests/test_processes.py checks that no group survives
an interrupted run and that no test starts a process any other way.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Generator, Iterator, Sequence
from types import FrameType
from typing import Any

import pytest

from pigeon.demo.processes import ServerProcess as _ServerProcess

Args = Sequence[str | os.PathLike[str]]

_groups: dict[int, subprocess.Popen[Any]] = {}  # process group id -> its leader
# Every process started, held until it has ended and its test is over: then its pipes
# are closed here, not left to the garbage collector (a ResourceWarning, an error).
_started: list[subprocess.Popen[Any]] = []
_lock = threading.RLock()  # re-entered by a signal handler that lands inside spawn


def spawn(args: Args, **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)`` as the leader of a new session, recorded."""
    if popen.pop("start_new_session", True) is not True or "process_group" in popen:
        raise ValueError("a test's process always gets a session of its own")
    proc: subprocess.Popen[Any] = subprocess.Popen(args, start_new_session=True, **popen)
    with _lock:
        _groups[proc.pid] = proc
        _started.append(proc)
    return proc


def close_pipes(ended_only: bool = True) -> None:
    """Close the pipes of every process started that has ended (or of all of them)."""
    with _lock:
        done = [p for p in _started if not ended_only or p.poll() is not None]
        _started[:] = [p for p in _started if p not in done]
    for proc in done:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """End ``proc``'s whole group: SIGTERM, up to ``grace`` seconds for the leader, then
    SIGKILL for every member left; forget it."""
    if proc.poll() is None and grace > 0:
        _signal_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    _signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
    with _lock:
        _groups.pop(proc.pid, None)


def run(
    args: Args,
    *,
    input: Any = None,
    timeout: float | None = None,
    check: bool = False,
    capture_output: bool = False,
    **popen: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` through ``spawn``: the group (anything the command left behind
    included) is killed when the command ends or its ``timeout`` passes."""
    if capture_output:
        popen |= {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    proc = spawn(args, **popen)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stop(proc, grace=0)
        exc.output, exc.stderr = proc.communicate()
        raise
    finally:
        stop(proc, grace=0)
    assert proc.returncode is not None
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def served_app(
    app: str, db: str, *extra: str, probe: str, **popen: Any
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``pigeon serve --app APP --db DB --test-hooks`` on a free loopback port through
    ``spawn``, once its ``probe`` path answers; the process and its URL, stopped after."""
    from tests.waiting import until_answers  # here: tests.waiting is the plugin's user

    args = [sys.executable, "-c", "from pigeon.cli import main; main()", "serve"]
    args += ["--app", app, "--db", db, "--port", "0", "--test-hooks", *extra]
    proc = spawn(args, stdout=subprocess.PIPE, text=True, **popen)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.rstrip().endswith(f": the app {app}"), line
        url = line.split()[3]
        until_answers(url + probe, 60, proc=proc)
        yield proc, url
    finally:
        stop(proc, grace=0)


class ServerProcess(_ServerProcess):
    """The demo's ``pigeon serve`` process, started by ``spawn`` (recorded, own group)."""

    def _spawn(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        return spawn(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def recorded() -> list[int]:
    """The process groups recorded and not yet stopped."""
    with _lock:
        return list(_groups)


def kill_all(groups: Sequence[int] | None = None) -> None:
    """SIGKILL every recorded group (or those of ``groups``) and reap the leaders."""
    with _lock:
        chosen = [_groups[g] for g in (list(_groups) if groups is None else groups) if g in _groups]
    for proc in chosen:
        stop(proc, grace=0)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM/SIGHUP: kill every group now, then unwind as Ctrl-C does (fixtures torn
    down); a second signal of the kind gets its default action."""
    kill_all()
    signal.signal(signum, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    atexit.register(kill_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _interrupt)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A group started by the test body and still recorded when the body ends is killed:
    nothing after the body can need it (fixtures started theirs before)."""
    before = set(recorded())
    try:
        return (yield)
    finally:
        kill_all([g for g in recorded() if g not in before])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """After the fixtures' teardown nothing reads a pipe of a process that has ended."""
    try:
        return (yield)
    finally:
        close_pipes()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kill_all()
    close_pipes(ended_only=False)
