"""Run every ``bench/*_bench.py`` module and print one table: ``python -m bench``."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

from bench._condition import measure
from bench._report import Row, dump, print_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, about a minute")
    parser.add_argument("--only", action="append", default=[], help="module name, repeatable")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    folder = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(folder)]) if m.name.endswith("_bench"))
    if args.only:
        names = [n for n in names if n in args.only or n.removesuffix("_bench") in args.only]
    print("measuring the machine's condition ...", file=sys.stderr, flush=True)
    condition = measure()
    rows: list[Row] = []
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"running {name} ...", file=sys.stderr, flush=True)
        run = module.run
        kwargs = {"quick": args.quick} if "quick" in inspect.signature(run).parameters else {}
        rows.extend(run(**kwargs))
    print(condition.markdown(), flush=True)
    print_rows(rows)
    if args.json:
        dump(rows, args.json)
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
