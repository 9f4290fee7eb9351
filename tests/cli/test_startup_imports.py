"""What ``pigeon serve``, ``pigeon worker`` and ``pigeon jobs`` leave unloaded until it is
asked for: every test that starts one, and an operator restarting one, waits for its
imports. The relay (and with it pigeon.jobs) loads only with ``--relay-to``, the
reference app only when it is served (the worker's tasks and the app's tables come
without it), the operations page not for ``pigeon jobs``' figures, Jinja2 with the first
page rendered, prometheus_client with the first scrape of ``/metrics``, rich (the tables
of ``pigeon keys``) not for serving or working. Checked by name in ``sys.modules`` of a
new interpreter, not timed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests import processes

# Loaded only when used, however the serving process was started.
NEVER_AT_START = (
    "pigeon.cli.relay_cmd",
    "pigeon.cli.keys_cmd",
    "rich",
    "jinja2",
    "prometheus_client",
    "pigeon.ops.metrics",
)


def _loaded(code: str, names: tuple[str, ...]) -> dict[str, bool]:
    """For each of ``names``: is it in ``sys.modules`` once ``code`` has run?"""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps({{n: n in sys.modules for n in {names!r}}}))"
    )
    out = processes.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    loaded: dict[str, bool] = json.loads(out.splitlines()[-1])
    return loaded


def test_the_serve_command_loads_no_app_no_relay_and_no_jobs() -> None:
    names = (*NEVER_AT_START, "pigeon.jobs", "pigeon.reference.notes", "pigeon.ops")
    loaded = _loaded("import pigeon.cli.serve_cmd", names)
    assert not any(loaded.values()), loaded


def test_the_reference_app_is_served_without_the_page_renderer_or_the_metrics(
    tmp_path: Path,
) -> None:
    # As `pigeon serve` builds it in each serving process; its page and /metrics routes
    # are there (pigeon.ops.dashboard and pigeon.ops.web loaded), their libraries not yet.
    code = (
        "from pigeon.cli.serve_cmd import served_app\n"
        "from pigeon.server.options import DatabaseOptions, ServerOptions\n"
        f"served_app(ServerOptions(database=DatabaseOptions({str(tmp_path / 'db')!r})))\n"
    )
    loaded = _loaded(code, (*NEVER_AT_START, "pigeon.ops.dashboard", "pigeon.ops.web"))
    assert loaded == {
        **dict.fromkeys(NEVER_AT_START, False),
        "pigeon.ops.dashboard": True,
        "pigeon.ops.web": True,
    }


def test_the_worker_runs_the_reference_tasks_without_the_reference_web_app() -> None:
    code = (
        "from pigeon.cli.worker_cmd import DEMO_APP\n"
        "from pigeon.jobs.app import load_app\n"
        "load_app(DEMO_APP)\n"
    )
    names = (
        "pigeon.reference.jobs",
        "pigeon.reference.notes",
        "pigeon.server",
        "starlette",
        "rich",
    )
    loaded = _loaded(code, names)
    assert loaded == {**dict.fromkeys(names, False), "pigeon.reference.jobs": True}


def test_the_jobs_commands_read_the_figures_without_the_operations_page() -> None:
    code = "import pigeon.cli.jobs_cmd\n"
    names = ("pigeon.ops.queries", "pigeon.ops.dashboard", "pigeon.server", "starlette")
    loaded = _loaded(code, names)
    assert loaded == {**dict.fromkeys(names, False), "pigeon.ops.queries": True}
