"""The example application: ``python -m examples.fastapi_orders.app [--port N]`` serves it
on 127.0.0.1:8000 over ``DATABASE_URL`` (default: sqlite:///orders.db), its tables and
pigeon's made first, as a deployment's migration step would. ``pigeon serve --app
examples.fastapi_orders.app:serve --db PATH_OR_URL`` serves it with the command's options
(its authentication, body limit, keys, test hooks)."""

from __future__ import annotations

import argparse

from fastapi import FastAPI
from sqlalchemy import Engine, create_engine

from examples.fastapi_orders import notes, orders
from examples.fastapi_orders.models import Base, database_url
from examples.fastapi_orders.state import pigeon
from pigeon.integrations.fastapi import principal_from, sqlalchemy_url
from pigeon.integrations.fastapi.migrations import migrate_tables
from pigeon.server import ServerOptions


def migrate(engine: Engine) -> None:
    """The app's tables and pigeon's, in one transaction (an Alembic project would run
    ``alembic upgrade heads`` with pigeon's revisions in its version locations instead).
    pigeon's come first: they take the migration's lock (BEGIN IMMEDIATE on SQLite, an
    advisory lock on PostgreSQL), so processes migrating at once make each table once."""
    with engine.begin() as conn:
        migrate_tables(conn)
        Base.metadata.create_all(conn)


def create_app(url: str | None = None, options: ServerOptions | None = None) -> FastAPI:
    """The app on ``url`` (a SQLAlchemy URL); ``options``: pigeon serve's, if it serves it."""
    app = FastAPI(title="orders and notes, exactly once")
    app.state.engine = create_engine(url or database_url(), pool_size=10, max_overflow=20)
    app.include_router(orders.router)
    app.include_router(notes.router)
    # The refusals in /openapi.json, the edge's batches, and the server's options if any.
    pigeon.install(app, batch=True, options=options)
    if options is not None:
        app.state.principal = principal_from(options)  # who calls: as --auth says
    return app


def serve(options: ServerOptions) -> FastAPI:
    """The factory of ``pigeon serve --app examples.fastapi_orders.app:serve``: the app
    on the command's database (``--db``) with its options, its tables made (by each
    process of ``--workers N``, one after the other)."""
    app = create_app(sqlalchemy_url(options), options)
    migrate(app.state.engine)
    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="orders and notes, exactly once")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    app = create_app()
    migrate(app.state.engine)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
