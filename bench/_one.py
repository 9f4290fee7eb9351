"""One benchmark module run in this interpreter, its rows written to a JSON file:
``python -m bench._one bench.e2e_bench ROWS.json [--quick]``. ``python -m bench`` runs
each module so, in a process of its own: what ran before it (its heap, its imports, the
threads it left) is not in its figures."""

from __future__ import annotations

import importlib
import inspect
import sys

from bench._report import dump


def main(argv: list[str]) -> int:
    module_name, path, *flags = argv
    run = importlib.import_module(module_name).run
    quick = "quick" in inspect.signature(run).parameters
    dump(run(quick="--quick" in flags) if quick else run(), path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
