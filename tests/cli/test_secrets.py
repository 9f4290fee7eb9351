"""The secrets the CLI takes (database URLs, broker URLs, tokens) come from the environment
or an owner-only file as well as the command line, and no output shows them.

Found: ``--relay-to`` / ``--to`` took a broker password on the command line only (in
``ps`` for every local user), and a bad URL option printed the whole URL, password
included; psycopg quotes the bad part of a DSN (``invalid percent-encoded token:
"PW%zz"``). Every command is found by walking the typer app, every option that may hold a
secret is driven into its errors with a canary password, and the canary must be in no
output."""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from typer.testing import CliRunner, Result

from pigeon.cli import app
from pigeon.storage.server import open_server_db
from tests import processes

from ..jobs.brokers import fill
from .commands import leaves

URL_ENVS = {"PIGEON_DB", "PIGEON_RELAY_TO"}
TOKEN_ENVS = {"PIGEON_JWT_SECRET", "PIGEON_OPERATOR_TOKEN"}
# Names an option holding a credential would have; each such option must be a secret one.
SECRET_NAME = re.compile(r"^(db|to|relay_to)$|secret|token|password|passwd|dsn|url|credential")
PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]


def canary() -> str:
    return f"Cnry{uuid.uuid4().hex[:12]}"


def secret_params() -> Iterator[tuple[tuple[str, ...], click.Command, click.Parameter]]:
    for path, command in leaves():
        for param in command.params:
            if param.envvar in URL_ENVS | TOKEN_ENVS:
                yield path, command, param


def test_every_option_that_may_hold_a_secret_has_the_environment_and_file_ways() -> None:
    named = 0
    for path, command in leaves():
        for param in command.params:
            if param.param_type_name == "option" and SECRET_NAME.search(param.name or ""):
                named += 1
                assert param.envvar in URL_ENVS | TOKEN_ENVS, (path, param.name)
    assert named >= 15  # serve, worker, relay, plan, jobs, keys: --db, --to, --relay-to...


@pytest.fixture
def server_db(tmp_path: Path) -> str:
    db = tmp_path / "server.db"
    open_server_db(str(db)).close()
    return str(db)


def _fill(command: click.Command, skip: str, server_db: str, tmp: Path) -> list[str]:
    """Values for the command's other required parameters, as a user would give them."""
    given = {
        "db": ["--db", server_db],
        "to": ["--to", "redis://127.0.0.1:1"],
        "queue": ["--queue", "grading=1"],
        "reason": ["--reason", "tested"],
        "job_id": ["1"],
        "backlog": ["--backlog", "10"],
        "arrival_rate": ["--arrival-rate", "1"],
        "target": ["--target", "60"],
    }
    args: list[str] = []
    for param in command.params:
        if param.required and param.name != skip:
            assert param.name in given, f"add a value for {param.name!r} to this test"
            args += given[param.name]
    return args


def _invoke(path: tuple[str, ...], args: list[str], env: dict[str, str] | None = None) -> Result:
    extra = ["--port", "0"] if path == ("serve",) else []
    return CliRunner().invoke(app, [*path, *args, *extra], env={"COLUMNS": "200", **(env or {})})


def _everything(result: Result) -> str:
    return f"{result.output}\n{result.stderr}\n{result.exception!r}"


def _bad_urls(env: str, secret: str, *, makes_databases: bool = False) -> list[str]:
    """URLs (each with ``secret`` as its password or token) that each command refuses
    before it starts anything: a bad option, scheme, port, encoding; a host that refuses;
    a database that does not exist (but for `pigeon rehearse`, which makes it)."""
    if env == "PIGEON_DB":
        missing = f"postgresql://postgres:{secret}@127.0.0.1:5432/no_such_db_{uuid.uuid4().hex[:6]}"
        return [
            f"postgresql://ada:{secret}@127.0.0.1:1/app",
            f"postgresql://ada:{secret}@127.0.0.1:5432/app?bogus=1",
            f"postgresql://ada:{secret}%zz@127.0.0.1:5432/app",
            f"postgresql://ada:{secret}@127.0.0.1:99999/app",
            *([] if makes_databases else [missing]),
            f"postgresql://127.0.0.1:1/app?password={secret}",
            f"mysql://ada:{secret}@127.0.0.1/app",
        ]
    return [
        f"redis://:{secret}@127.0.0.1:6379?bogus=1",
        f"kafka://ada:{secret}@127.0.0.1:9092",
        f"nats://ada:{secret}@127.0.0.1:99999",
        f"nats://{secret}@127.0.0.1:4222?subject_prefix=audit",
        f"amqp://ada:{secret}@127.0.0.1/?exchange=amq.mine",
        f"redis://:{secret}@127.0.0.1:6379/zero",
    ]


@pytest.mark.parametrize(
    ("path", "name"),
    sorted({(p, param.name or "") for p, _, param in secret_params()}),
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else v,
)
def test_no_error_of_any_command_shows_the_password(
    path: tuple[str, ...], name: str, server_db: str, tmp_path: Path
) -> None:
    command = dict(leaves())[path]
    param = next(p for p in command.params if p.name == name)
    flag = param.opts[0]
    secret = canary()
    rest = _fill(command, name, server_db, tmp_path)
    if param.envvar in TOKEN_ENVS:
        secret = secret[:10]
        values = [secret]  # too short for either (16, 32): refused, saying why
    else:
        values = _bad_urls(str(param.envvar), secret, makes_databases=path == ("rehearse",))
    for value in values:
        for how in ("argument", "environment"):
            if how == "argument":
                result = _invoke(path, [*rest, flag, value])
            else:
                result = _invoke(path, rest, {str(param.envvar): value})
            assert result.exit_code not in (0, None), (value, how, result.output)
            assert secret not in _everything(result), (value, how, _everything(result))


def test_a_secret_file_open_to_others_is_refused_for_every_option(
    tmp_path: Path, server_db: str
) -> None:
    loose = tmp_path / "loose"
    loose.write_text("postgresql://ada:pw@127.0.0.1:1/app\n")
    loose.chmod(0o644)
    checked = 0
    for path, command, param in secret_params():
        rest = _fill(command, param.name or "", server_db, tmp_path)
        for args, env in (
            ([*rest, param.opts[0], f"@{loose}"], None),
            (rest, {str(param.envvar): f"@{loose}"}),
        ):
            result = _invoke(path, args, env)
            assert result.exit_code == 2, (path, param.name, result.output)
            assert "chmod 600" in " ".join(result.output.split()), (path, result.output)
            checked += 1
    assert checked >= 30


def test_a_secret_comes_from_the_environment_or_an_owner_only_file(
    tmp_path: Path, server_db: str
) -> None:
    secret_file = tmp_path / "db-url"
    secret_file.write_text(server_db + "\n")
    secret_file.chmod(0o600)
    for args, env in (
        (["--db", f"@{secret_file}"], {}),
        ([], {"PIGEON_DB": server_db}),
        ([], {"PIGEON_DB": f"@{secret_file}"}),
    ):
        result = _invoke(("jobs", "list"), args, env)
        assert result.exit_code == 0, (args, env, result.output)
    missing = _invoke(("jobs", "list"), ["--db", f"@{tmp_path / 'nope'}"])
    assert missing.exit_code == 2 and "cannot read" in missing.output


@pytest.mark.parametrize("kind", ["redis", "nats", "amqp"])
def test_a_broker_that_refuses_never_shows_the_password(tmp_path: Path, kind: str) -> None:
    """The relay meets the broker's own errors (down, here): its output, its log and the
    error it stores on the row hide the password; it came from the environment, so it was
    never in the process's arguments either."""
    db = tmp_path / "server.db"
    database = open_server_db(str(db))
    fill(database, 2)
    database.close()
    secret = canary()
    url = f"{kind}://ada:{secret}@127.0.0.1:1"
    result = processes.run(
        [*PIGEON, "relay", "--db", str(db), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"PIGEON_RELAY_TO": url, "COLUMNS": "200"},
    )
    assert result.returncode == 1, result.stderr
    assert "did not confirm" in result.stderr
    assert secret not in result.stdout + result.stderr
    with sqlite3.connect(db) as conn:
        errors = [row[0] for row in conn.execute("SELECT last_error FROM pigeon_outbox")]
    assert errors[0] and all(secret not in (error or "") for error in errors)


def test_a_bug_keeps_its_traceback_but_not_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], server_db: str
) -> None:
    """Not a user's error: the traceback stays (the exit status too), the password goes."""
    from pigeon.cli import main, relay_cmd

    secret = canary()

    def broken(url: str, command: str) -> str:
        raise RuntimeError(f"bug while reading {url}")

    monkeypatch.setattr(relay_cmd, "checked_broker_url", broken)
    url = f"redis://:{secret}@127.0.0.1:6379/0"
    monkeypatch.setattr(sys, "argv", ["pigeon", "relay", "--db", server_db, "--to", url])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: bug while reading redis://:***@" in err
    assert secret not in err
