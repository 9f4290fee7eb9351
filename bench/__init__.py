"""pigeon's benchmarks (not tests): ``python -m bench [--quick] [--only NAME]``.

Each ``bench/*_bench.py`` module exposes ``run(*, quick: bool = False) -> list[dict]``;
every row has the keys ``benchmark``, ``pigeon``, ``baseline``, ``ratio`` and ``target``
(see ``bench._report.row``).
"""
