"""What ``pigeon serve`` sets in each serving process for its memory (pigeon.server.memory)."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

from pigeon.server.memory import GC_YOUNG
from tests import processes


def test_a_serving_process_collects_its_youngest_objects_less_often(tmp_path: Path) -> None:
    # In a process of its own, as uvicorn's factory builds the app: the test process's
    # collector is left as it is.
    code = (
        "import gc, json\n"
        "from pigeon.cli.serve_cmd import served_app\n"
        "from pigeon.server.options import DatabaseOptions, ServerOptions\n"
        "before = gc.get_threshold()\n"
        f"served_app(ServerOptions(database=DatabaseOptions({str(tmp_path / 'db')!r})))\n"
        "print(json.dumps([before, gc.get_threshold()]))\n"
    )
    done = processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == list(gc.get_threshold())  # CPython's defaults, as in this process
    assert after == [GC_YOUNG, *before[1:]]
