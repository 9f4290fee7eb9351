"""The example application: ``python -m examples.fastapi_orders.app [--port N]`` serves it
on 127.0.0.1:8000 over ``DATABASE_URL`` (default: sqlite:///orders.db), its tables and
pigeon's made first, as a deployment's migration step would."""

from __future__ import annotations

import argparse

from fastapi import FastAPI
from sqlalchemy import Engine, create_engine

from examples.fastapi_orders import notes, orders
from examples.fastapi_orders.models import Base, database_url
from examples.fastapi_orders.state import pigeon
from pigeon.integrations.fastapi.migrations import migrate_tables


def migrate(engine: Engine) -> None:
    """The app's tables and pigeon's (an Alembic project would run ``alembic upgrade
    heads`` with pigeon's revisions in its version locations instead)."""
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        migrate_tables(conn)


def create_app(url: str | None = None) -> FastAPI:
    app = FastAPI(title="orders and notes, exactly once")
    app.state.engine = create_engine(url or database_url(), pool_size=10, max_overflow=20)
    app.include_router(orders.router)
    app.include_router(notes.router)
    pigeon.install(app, batch=True)  # the refusals in /openapi.json; the edge's batches
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
