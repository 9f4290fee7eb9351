"""The optional parts of pigeon and what each needs installed.

``pip install pigeon`` is the edge: the offline queue, the sync engine, the HTTP transport
and the queue commands. A module of an optional part calls `require` first, so that using
it without its extra fails at once with one line naming the extra, not with an import
error from deep inside a dependency.
"""

from __future__ import annotations

import importlib.util

from pigeon.exceptions import MissingExtra

# Each extra and the modules it installs (import names), as pyproject.toml declares them.
EXTRAS: dict[str, tuple[str, ...]] = {
    "server": ("starlette", "uvicorn", "jsonschema", "jwt", "jinja2", "prometheus_client"),
    "postgres": ("psycopg", "psycopg_pool"),
    "relay": ("redis", "nats", "aio_pika"),
    "crdt": ("pycrdt",),
    "fastapi": ("fastapi", "sqlalchemy"),
    "django": ("django",),
}


def missing(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of ``extra`` (or the given ones of it) that are not installed."""
    return [m for m in modules or EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require_extra(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise `MissingExtra` naming ``extra`` when ``what`` cannot run without it."""
    absent = missing(extra, modules)
    if absent:
        raise MissingExtra(
            f"{what} needs the {extra!r} extra: pip install 'pigeon[{extra}]' "
            f"(not installed: {', '.join(absent)})"
        )


def extra_of(module: str) -> str | None:
    """The extra that installs ``module`` (an import name, dotted or not), if any."""
    top = module.partition(".")[0]
    return next((extra for extra, names in EXTRAS.items() if top in names), None)
