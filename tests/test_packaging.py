"""``pip install pigeon`` fits a device: the wheel, installed without extras in a fresh
virtualenv, runs the README's edge quick start against a real server and installs none
of the server's packages; a server module used there fails with one line naming its
extra. The wheel is built from this checkout; its dependencies come from the package
index (or pip's cache)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests import processes
from tests.cli.test_serve_cmd import start

ROOT = Path(__file__).resolve().parent.parent
SERVER_PACKAGES = {
    "starlette", "uvicorn", "psycopg", "psycopg-binary", "psycopg-pool", "jinja2",
    "prometheus-client", "pycrdt", "jsonschema", "fastjsonschema", "pyjwt", "redis", "nats-py",
    "aio-pika",
    # Not the server's, but no device needs it: typer 0.29 pulled it in for every command.
    "pydantic", "pydantic-core",
}  # fmt: skip
NOT_SOURCE = (
    ".git",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)

QUICK_START = """
import sys
from pigeon import HttpTransport, OfflineQueue, QueueOptions, SyncEngine, SyncOptions

def get_token() -> str:
    return "alice.1"

queue = OfflineQueue("notes-outbox.db", QueueOptions(durability="full"))
transport = HttpTransport(sys.argv[1], token=get_token, batch=50)
engine = SyncEngine(queue, transport, SyncOptions(cycle_size=50))
op = engine.enqueue("create", "note:42", {"id": "42", "title": "Groceries", "body": "eggs"})
engine.enqueue("update", "note:42", {"id": "42", "title": "Groceries", "body": "eggs, milk"})
engine.start()
engine.flush(timeout=30)
engine.close()
print(queue.stats().depth)
"""


# The fresh virtualenv sees only what is installed in it, whatever this run's path.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _pip(venv: Path, *args: str) -> str:
    done = processes.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=venv,
        env=CLEAN_ENV,
    )
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


@pytest.fixture(scope="module")
def edge_venv(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The wheel installed in a fresh virtualenv, made once per run: pytest-xdist's
    workers share their base temporary folder's parent, and the first one to take the
    lock there builds it (a minute of pip) while any other waits and then uses it."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # under xdist: the run's folder, above the workers' own
        shared = shared.parent
    venv = shared / "edge-venv"
    with (shared / "edge-venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "built").exists():
            _build(venv)
            (venv / "built").touch()
    return venv


def _build(venv: Path) -> None:
    tmp = venv.parent / "edge-wheel"
    shutil.rmtree(tmp, ignore_errors=True)  # what a build that failed left
    shutil.rmtree(venv, ignore_errors=True)
    tmp.mkdir()
    source = tmp / "source"  # a copy: the build leaves its build/ folder there
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    built = processes.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp,
        env=CLEAN_ENV,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp.glob("pigeon-*.whl")
    processes.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip(venv, "install", "-q", str(wheel))


@pytest.mark.slow
def test_the_edge_install_has_none_of_the_servers_packages(edge_venv: Path) -> None:
    listed = _pip(edge_venv, "list", "--format=freeze")
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert "pigeon" in installed
    assert installed & SERVER_PACKAGES == set()


@pytest.mark.slow
def test_the_readme_edge_quick_start_runs_from_the_edge_install(
    edge_venv: Path, tmp_path: Path
) -> None:
    proc, url = start(tmp_path / "server.db")  # the server, from the full install
    try:
        (tmp_path / "quick_start.py").write_text(textwrap.dedent(QUICK_START))
        done = processes.run(
            [str(edge_venv / "bin" / "python"), "quick_start.py", url],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=CLEAN_ENV,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "0"  # nothing left to send
        note = httpx.get(url + "/notes/42", headers={"Authorization": "Bearer alice.1"})
        assert note.status_code == 200 and note.json()["data"]["body"] == "eggs, milk"
        stats = processes.run(
            [str(edge_venv / "bin" / "pigeon"), "queue", "stats", "-f", "notes-outbox.db"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=CLEAN_ENV,
        )
        assert stats.returncode == 0, stats.stderr
    finally:
        processes.stop(proc)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "extra"),
    [
        ("import pigeon.server", "server"),
        ("import pigeon.ops", "server"),
        ("import pigeon.integrations.fastapi", "fastapi"),
        ("import pigeon.integrations.django", "django"),
        ("from pigeon.storage.server import open_server_db; open_server_db('postgresql://x/y')",
         "postgres"),
    ],
)  # fmt: skip
def test_a_server_module_without_its_extra_is_one_line_naming_it(
    edge_venv: Path, code: str, extra: str
) -> None:
    done = processes.run(
        [str(edge_venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=CLEAN_ENV,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pigeon.exceptions.MissingExtra: ") and f"pigeon[{extra}]" in last
    served = processes.run(
        [str(edge_venv / "bin" / "pigeon"), "serve", "--db", str(edge_venv / "x.db")],
        capture_output=True,
        text=True,
        timeout=60,
        env=CLEAN_ENV,
    )
    assert served.returncode == 1 and "pigeon[server]" in served.stderr
    assert "Traceback" not in served.stderr
