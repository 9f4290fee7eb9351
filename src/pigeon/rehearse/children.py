"""The processes a rehearsal runs: its own ``pigeon serve`` and ``pigeon worker``, real and
separate, so that a SIGKILL is a real crash.

Each child is a pigeon command started with ``pigeon.orphans.child_env`` (it ends with the
rehearsal, even a SIGKILLed one) in a process group of its own, so that a kill reaches
the worker supervisor's processes too. ``Children.close`` ends every one still running.
Their output goes to a log file per process kind in the run's folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from pigeon.core.wire import HEALTH_PATH
from pigeon.exceptions import PigeonError
from pigeon.orphans import child_env
from pigeon.server.testhooks import ENV_KEY as TEST_HOOKS_KEY

PIGEON = (sys.executable, "-m", "pigeon")
_SERVING = re.compile(r"pigeon serving on (http://\S+) \(pid (\d+)\)")
STARTUP = 60.0  # seconds a child may take to start on a loaded machine
# pigeon serve's and pigeon worker's --relay-to from the environment: never the one of the
# environment the rehearsal was started in (a production broker), only the run's own.
RELAY_TO_ENV = "PIGEON_RELAY_TO"


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != RELAY_TO_ENV}
    return env | dict(extra or {})


class ChildFailed(PigeonError):
    """A child did not start, or ended when it should have run: its log's last lines."""


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


@dataclass
class Children:
    """Every process of one run; ``close`` ends those still running."""

    folder: Path
    running: list[subprocess.Popen[Any]] = field(default_factory=list)

    def spawn(
        self, args: list[str], log: str, env: Mapping[str, str], **popen: Any
    ) -> subprocess.Popen[Any]:
        out: IO[bytes] = open(self.folder / log, "ab")  # noqa: SIM115 - the child holds it
        try:
            proc: subprocess.Popen[Any] = subprocess.Popen(
                args,
                env=child_env(dict(env)),
                stderr=out,
                stdout=popen.pop("stdout", out),
                start_new_session=True,
                **popen,
            )
        finally:
            out.close()
        self.running.append(proc)
        return proc

    @staticmethod
    def signal(proc: subprocess.Popen[Any], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def end(self, proc: subprocess.Popen[Any], grace: float) -> int | None:
        """SIGTERM to its group and ``grace`` seconds (none: SIGKILL at once), then SIGKILL
        to whatever of the group is left; its pipes closed; its exit status."""
        if proc.poll() is None and grace > 0:
            self.signal(proc, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        self.signal(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:  # not left to the garbage collector
                pipe.close()
        if proc in self.running:
            self.running.remove(proc)
        return proc.returncode

    def close(self) -> None:
        for proc in list(self.running):
            self.end(proc, grace=0)


@dataclass
class Server:
    """``pigeon serve`` on loopback with the test hooks on, restarted on the same port."""

    children: Children
    db: str
    app: str | None = None  # module:factory (pigeon serve --app); None: the reference app
    relay_to: str | None = None  # a broker for the relay beside the server
    port: int = 0
    operator_token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    proc: subprocess.Popen[str] | None = field(default=None, repr=False)
    kills: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def operator(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.operator_token}"}

    def start(self) -> Server:
        args = [*PIGEON, "serve", "--db", self.db, "--host", "127.0.0.1", "--port", str(self.port)]
        # demo authentication whatever PIGEON_AUTH says: each request names its principal
        args += ["--auth", "demo", "--test-hooks", *(["--app", self.app] if self.app else [])]
        env = _env({"PIGEON_OPERATOR_TOKEN": self.operator_token, TEST_HOOKS_KEY: "1"})
        if self.relay_to:  # in the environment: a password is in no command line
            env[RELAY_TO_ENV] = self.relay_to
        proc = self.children.spawn(args, "serve.log", env, stdout=subprocess.PIPE, text=True)
        self.proc = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = _SERVING.search(line)
        if match is None:
            self.children.end(proc, grace=0)
            raise ChildFailed(f"pigeon serve did not start: {line.strip()!r} {_tail(self.log)}")
        self.port = int(match.group(1).rsplit(":", 1)[1])
        self._wait_healthy()
        return self

    @property
    def log(self) -> Path:
        return self.children.folder / "serve.log"

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP
        # One client for every probe: each new one parses the CA bundle anew (~0.1 s of
        # CPU, taken from the server it waits for).
        with httpx.Client(timeout=2.0) as probe:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    break
                with contextlib.suppress(httpx.TransportError):
                    # Any answer: an app of its own may have no health probe at pigeon's path.
                    probe.get(self.url + HEALTH_PATH)
                    return
                time.sleep(0.05)
        raise ChildFailed(f"pigeon serve on {self.url} never answered: {_tail(self.log)}")

    def kill(self) -> None:
        """SIGKILL: no finally block runs, nothing is flushed."""
        if self.proc is not None:
            self.children.end(self.proc, grace=0)
            self.kills += 1
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.children.end(self.proc, grace=10)
            self.proc = None


@dataclass
class Workers:
    """``pigeon worker`` for the app's queues, each with a fixed number of threads."""

    children: Children
    db: str
    jobs: str  # module:attr of the jobs.App
    threads: Mapping[str, int]
    processes: int = 1
    env: dict[str, str] = field(default_factory=dict)  # for the rehearsal's shim
    proc: subprocess.Popen[Any] | None = field(default=None, repr=False)

    def start(self) -> Workers:
        queues = [f"--queue={q}={n}:{n}" for q, n in sorted(self.threads.items())]
        args = [*PIGEON, "worker", "--db", self.db, "--app", self.jobs, *queues]
        args += ["--processes", str(self.processes)]
        self.proc = self.children.spawn(args, "worker.log", _env(self.env))
        time.sleep(0.2)
        if self.proc.poll() is not None:
            log = self.children.folder / "worker.log"
            raise ChildFailed(f"pigeon worker ended at once: {_tail(log)}")
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM, not waited for: they stop claiming and finish or hand back what they
        hold (`stop` waits for them)."""
        if self.proc is not None:
            self.children.signal(self.proc, signal.SIGTERM)

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM: stop claiming, finish or hand back what they hold; waited for."""
        if self.proc is None:
            return None
        status = self.children.end(self.proc, grace=grace)
        self.proc = None
        return status

    def kill(self) -> None:
        if self.proc is not None:
            self.children.end(self.proc, grace=0)
            self.proc = None
