"""``pigeon serve``: the reference server as a process that can be killed and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests import processes
from tests.ops.scrape import lifecycle_counts
from tests.waiting import answers, until_answers, wait_for

PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]


OPERATOR_TOKEN = "operator-token-of-the-serve-tests"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
USER = {"Authorization": "Bearer ada.1"}


def start(
    db: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``pigeon serve`` on a free port, once it answers its health probe; ``env`` (by
    default the operator token of these tests) is added to this process's environment."""
    proc = processes.spawn(
        [*PIGEON, "serve", "--db", str(db), "--port", "0", *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | ({"PIGEON_OPERATOR_TOKEN": OPERATOR_TOKEN} if env is None else env),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("pigeon serving on http://"), line
    url = line.split()[3]
    until_answers(url + "/pigeon/v1/health", proc=proc)
    return proc, url


@pytest.mark.chaos
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_survives_sigkill_and_replays_after_restart(tmp_path: Path, workers: str) -> None:
    db = tmp_path / "server.db"
    proc, url = start(db, "--workers", workers)
    try:
        first = httpx.post(
            url + "/notes", json={"id": "1"}, headers={"Idempotency-Key": "k", **USER}
        )
        assert first.status_code == 201
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # Nothing is left serving: with workers, they die with their supervisor.
    wait_for(
        lambda: not answers(url + "/pigeon/v1/health", timeout=0.5),
        10,
        "the workers of the SIGKILLed supervisor to be gone",
        interval=0.1,
    )
    proc, url = start(db)
    try:
        again = httpx.post(
            url + "/notes", json={"id": "1"}, headers={"Idempotency-Key": "k", **USER}
        )
        ledger = httpx.get(url + "/pigeon/v1/ledger", headers=OPERATOR).json()["entries"]
    finally:
        processes.stop(proc)
    assert again.headers["idempotent-replayed"] == "true" and again.content == first.content
    assert len(ledger) == 1


def _children(pid: int) -> list[int]:
    """uvicorn's worker processes under ``pid`` (spawned: their command says so)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def _replaced(url: str) -> float:
    """``pigeon_lifecycle_events_total{kind="serve_worker_replaced"}`` from the server's
    /metrics (0 while no worker answers)."""
    try:
        text = httpx.get(url + "/metrics", headers=OPERATOR, timeout=5).text
    except httpx.TransportError:
        return 0.0
    return lifecycle_counts(text).get("serve_worker_replaced", 0.0)


def test_a_worker_replaced_is_one_line_at_the_default_level(tmp_path: Path) -> None:
    """uvicorn says it at INFO, below pigeon serve's default WARNING: pigeon says it."""
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = processes.spawn(
            [*PIGEON, "serve", "--db", str(tmp_path / "s.db"), "--port", "0", "--workers", "2"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=os.environ | {"PIGEON_OPERATOR_TOKEN": OPERATOR_TOKEN},
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving on" in line, line
        deadline = time.monotonic() + 30
        while len(_children(proc.pid)) < 2:
            assert time.monotonic() < deadline, "no two workers"
            time.sleep(0.1)
        url = line.split()[3]
        victim = _children(proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        while "replaced by worker" not in log.read_text():
            assert time.monotonic() < deadline + 30, log.read_text()
            time.sleep(0.1)
        # and counted in the database: the surviving or new worker's /metrics shows it
        while _replaced(url) < 1:
            assert time.monotonic() < deadline + 60, log.read_text()
            time.sleep(0.1)
    finally:
        processes.stop(proc)
    # (a loaded machine may see a slow replacement miss uvicorn's health check: replaced too)
    lines = [line for line in log.read_text().splitlines() if "replaced by worker" in line]
    assert f"worker {victim} died" in lines[0], lines
    assert all(" WARNING pigeon.serve " in line for line in lines), lines


def test_serve_refuses_a_foreign_file(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    foreign.write_bytes(b"this is not a database at all" * 100)
    result = processes.run(
        [*PIGEON, "serve", "--db", str(foreign), "--port", "0"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.startswith("pigeon serve: ") and "not a" in result.stderr


def refused(db: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``pigeon serve`` with arguments it must refuse: it must exit, not serve."""
    return processes.run(
        [*PIGEON, "serve", "--db", str(db), *extra], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_port_out_of_range_is_a_usage_error_and_creates_no_file(
    tmp_path: Path, port: str
) -> None:
    db = tmp_path / "server.db"
    result = refused(db, "--port", port)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "Invalid value for '--port'" in result.stderr
    assert not db.exists()


def test_a_port_in_use_is_a_usage_error_and_creates_no_file(tmp_path: Path) -> None:
    import socket

    db = tmp_path / "server.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = refused(db, "--port", str(taken.getsockname()[1]))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "cannot listen on 127.0.0.1:" in result.stderr
    assert not db.exists() and list(tmp_path.iterdir()) == []


def test_an_unknown_log_level_is_a_usage_error_and_creates_no_file(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    result = refused(db, "--port", "0", "--log-level", "bogus")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "Invalid value for '--log-level'" in result.stderr and "'bogus'" in result.stderr
    assert not db.exists()


def test_the_log_levels_offered_are_uvicorns() -> None:
    from typing import get_args

    from uvicorn.config import LOG_LEVELS

    from pigeon.server.options import LogLevel

    assert set(get_args(LogLevel)) == set(LOG_LEVELS)


@pytest.mark.parametrize(
    ("option", "value", "workers"),
    [
        ("--lock-timeout", "-5", "1"),
        ("--response-retention", "nan", "1"),
        ("--claim-retention", "-1", "1"),
        ("--claim-retention", "-1", "2"),  # uvicorn restarted crashing workers for ever
        ("--lock-timeout", "inf", "1"),
    ],
)
def test_a_bad_idempotency_policy_is_a_usage_error_before_serving(
    tmp_path: Path, option: str, value: str, workers: str
) -> None:
    db = tmp_path / "server.db"
    result = refused(db, "--port", "0", "--workers", workers, option, value)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "serving on" not in result.stdout and "Traceback" not in result.stderr
    assert f"'{option}'" in result.stderr
    assert not db.exists()


def test_the_options_name_the_flag_of_a_bad_value() -> None:
    import typer

    from pigeon.cli.serve_options import options_from_cli

    with pytest.raises(typer.BadParameter, match="--lock-timeout must be positive") as bad:
        options_from_cli(serve_args(lock_timeout=0.0))
    assert bad.value.param_hint == "'--lock-timeout'"
    with pytest.raises(typer.BadParameter, match="not a finite number") as bad:
        options_from_cli(serve_args(response_retention=float("nan")))
    assert bad.value.param_hint == "'--response-retention'"
    assert options_from_cli(serve_args(claim_retention=3e6)).intake.policy.claim_retention == 3e6


def serve_args(**given: object) -> dict[str, object]:
    """``pigeon serve``'s parameters as the command passes them, defaults and ``given``."""
    import inspect

    from pigeon.cli.serve_cmd import serve

    params = inspect.signature(serve).parameters
    defaults = {name: p.default for name, p in params.items()} | {"db": "server.db"}
    return defaults | given


def test_listen_socket_refuses_a_port_out_of_range_as_a_bad_parameter() -> None:
    import typer

    from pigeon.cli.listeners import listen_socket

    with pytest.raises(typer.BadParameter, match=r"cannot listen on 127\.0\.0\.1:70000"):
        listen_socket("127.0.0.1", 70000)


def test_the_listening_socket_says_tcp_so_responses_are_not_delayed_by_nagle() -> None:
    import socket

    from pigeon.cli.listeners import listen_socket

    sock = listen_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockname()[1] > 0
    finally:
        sock.close()


def test_serve_offers_the_server_settled_conflict_collections(tmp_path: Path) -> None:
    from tests.processes import ServerProcess

    with ServerProcess(tmp_path / "server.db") as server:
        spec = httpx.get(server.url + "/pigeon/v1/openapi.json").json()
        for path in ("/lww-notes", "/lww-notes/{id}", "/docs", "/docs/{id}"):
            assert path in spec["paths"], path
        reply = httpx.post(
            server.url + "/lww-notes",
            json={"id": "n1", "title": "t", "body": "b"},
            headers={
                "Idempotency-Key": "serve-lww-1",
                "X-Pigeon-Clock": "000001700000000000-0000000000-dev",
                **USER,
            },
        )
        assert reply.status_code in (200, 201), reply.text


def test_test_hooks_are_refused_on_a_non_loopback_host(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    refused = processes.run(
        [*PIGEON, "serve", "--db", str(db), "--host", "10.1.2.3", "--test-hooks"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "--test-hooks" in refused.stderr and "loopback" in refused.stderr
    assert not db.exists()


def test_test_hooks_need_their_second_key_in_the_environment(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    env = {k: v for k, v in os.environ.items() if k != "PIGEON_TEST_HOOKS"}
    refused = processes.run(
        [*PIGEON, "serve", "--db", str(db), "--port", "0", "--test-hooks"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert refused.returncode == 2
    assert "PIGEON_TEST_HOOKS=1" in refused.stderr
    assert not db.exists()


def test_loopback_is_told_by_address_not_by_name() -> None:
    from pigeon.server.auth_options import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "::", "example.org", ""))


@pytest.mark.slow
def test_the_workers_get_the_options_pickled_never_in_their_environment(tmp_path: Path) -> None:
    """``--workers 2``: each worker serves with the command's options (limits, claim mode,
    the JWT secret given as @FILE), and no worker's environment holds a ``PIGEON_SERVE_``
    setting or the secret: the options reach it pickled, through the pipe that starts it."""
    import jwt

    secret = "the-workers-tests-hs256-secret-0123456789"
    secret_file = tmp_path / "jwt-secret"
    secret_file.write_text(secret)
    secret_file.chmod(0o600)
    extra = ["--workers", "2", "--auth", "jwt", "--jwt-secret", f"@{secret_file}"]
    extra += ["--max-body", "777", "--max-batch-body", "888", "--claim-mode", "separate"]
    proc, url = start(tmp_path / "s.db", *extra, "--lock-timeout", "12")
    try:
        deadline = time.monotonic() + 30
        while len(_children(proc.pid)) < 2:
            assert time.monotonic() < deadline, "no two workers"
            time.sleep(0.1)
        for pid in [proc.pid, *_children(proc.pid)]:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert not [v for v in environ if v.startswith(b"PIGEON_SERVE_")]
            assert not [v for v in environ if secret.encode() in v]
        token = jwt.encode({"sub": "ada", "exp": int(time.time()) + 60}, secret, "HS256")
        for n in range(6):  # new connections: the kernel hands them to either worker
            with httpx.Client(base_url=url) as client:
                spec = client.get("/pigeon/v1/openapi.json").json()
                write = client.post(
                    "/notes",
                    json={"id": f"n{n}"},
                    headers={"Idempotency-Key": f"k{n}", "Authorization": f"Bearer {token}"},
                )
            limits = spec["x-pigeon-limits"]
            assert limits["max_body_bytes"] == 777 and limits["max_batch_body_bytes"] == 888
            contract = spec["x-pigeon-idempotency"]
            assert contract["claim_mode"] == "separate" and contract["lock_timeout_seconds"] == 12
            assert write.status_code == 201, write.text
    finally:
        processes.stop(proc)
