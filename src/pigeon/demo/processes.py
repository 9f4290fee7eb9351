"""A `pigeon serve` process that can be killed with SIGKILL and started again on its port.

The demo and the chaos tests use it: the server is a real, separate process, so a kill is
a real crash (no finally blocks, no flushed buffers), exactly what a power cut does.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import uvicorn

from pigeon.core.wire import HEALTH_PATH
from pigeon.orphans import child_env
from pigeon.server.testhooks import ENV_KEY as TEST_HOOKS_KEY

_SERVING = re.compile(r"pigeon serving on (http://\S+) \(pid (\d+)\)")


@dataclass
class ServerProcess:
    """``operator_token``: the server's operator credential (a fresh random one unless
    given), handed over in the environment as an operator should, never on the command
    line; ``operator_headers`` carry it. ``allow_anonymous``: writes without a token are
    let in as the user ``anonymous`` (off, as in ``pigeon serve``)."""

    db: Path | str
    port: int = 0
    extra_args: list[str] = field(default_factory=list)
    startup_timeout: float = 30.0
    operator_token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    allow_anonymous: bool = False
    _proc: subprocess.Popen[str] | None = field(default=None, init=False, repr=False)
    kills: int = field(default=0, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The server's command line (another server, e.g. an application's, says its own
        and prints the same ``pigeon serving on URL (pid N)`` line)."""
        args = [sys.executable, "-m", "pigeon", "serve", "--db", str(self.db)]
        args += ["--host", "127.0.0.1", "--port", str(self.port), *self.extra_args]
        if self.allow_anonymous:
            args.append("--allow-anonymous")
        return args

    def environment(self) -> dict[str, str]:
        # The server ends with this process even if it is SIGKILLed (pigeon.orphans).
        env = child_env() | {"PIGEON_OPERATOR_TOKEN": self.operator_token}
        if "--test-hooks" in self.extra_args:
            env[TEST_HOOKS_KEY] = "1"  # the fault switch's second key (pigeon.server.testhooks)
        return env

    def start(self) -> ServerProcess:
        self._proc = self._spawn(self.command(), self.environment())
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        match = _SERVING.search(line)
        if match is None:
            self._proc.kill()
            raise RuntimeError(f"pigeon serve did not start: {line!r}")
        self.port = int(match.group(1).rsplit(":", 1)[1])
        self._wait_healthy()
        return self

    def _spawn(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        # One client for every probe: each new one parses the CA bundle anew (~0.1 s of
        # CPU, taken from the server it waits for).
        with httpx.Client(timeout=1.0) as probe:
            while time.monotonic() < deadline:
                try:
                    if probe.get(self.url + HEALTH_PATH).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
        raise RuntimeError(f"pigeon serve on {self.url} never became healthy")

    @property
    def operator_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.operator_token}"}

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            self.kills += 1
        self._close_pipe()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        """The ended process's stdout, closed here rather than by the garbage collector."""
        if self._proc is not None and self._proc.poll() is not None and self._proc.stdout:
            self._proc.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def serve_in_thread(
    app: Any, *, log_level: str = "warning", lifespan: Literal["auto", "on", "off"] = "on"
) -> Iterator[str]:
    """A real uvicorn serving ``app`` on an ephemeral loopback port in a daemon thread, for
    demos and tests that need HTTP but not a separate process; yields the base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level=log_level, lifespan=lifespan)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
