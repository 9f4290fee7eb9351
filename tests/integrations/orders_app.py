"""A FastAPI + SQLAlchemy app for the integration's tests: an ORM row and a job per order.

``create_app(url, asynchronous=...)`` serves ``POST /orders`` under ``@pigeon.idempotent``
with a sync ``Session`` or an ``AsyncSession``; the body's ``fail`` picks how the handler
ends after writing its row and its job: ``raise`` (an exception), ``500``, ``400`` (an
``HTTPException``, stored), ``429`` (not stored), ``commit`` (commits by itself: refused).
The caller is the ``X-User`` header (``anonymous`` without one).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import String, create_engine, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pigeon.integrations.fastapi import Pigeon, defer, defer_async
from pigeon.integrations.fastapi.migrations import migrate_tables
from pigeon.server.limits import DEFAULT_MAX_BODY
from pigeon.server.options import ServerOptions
from pigeon.storage.crypto import Keyring


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))
    item: Mapped[str] = mapped_column(String(100))


class OrderIn(BaseModel):
    item: str
    fail: str | None = None


def sqlalchemy_url(url: str, *, asynchronous: bool = False) -> str:
    """A test database URL (a SQLite path or postgresql://) as SQLAlchemy names it."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return ("sqlite+aiosqlite:///" if asynchronous else "sqlite:///") + url


def prepare(url: str) -> None:
    """The app's table and pigeon's, as the application's migration makes them."""
    engine = create_engine(sqlalchemy_url(url))
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        migrate_tables(conn)
    engine.dispose()


def counts(url: str) -> dict[str, int]:
    """Orders, jobs and claims in the database at ``url``."""
    engine = create_engine(sqlalchemy_url(url))
    with Session(engine) as session:
        found = {
            "orders": session.scalar(select(func.count()).select_from(Order)) or 0,
            "jobs": session.scalar(text("SELECT count(*) FROM pigeon_jobs")) or 0,
            "claims": session.scalar(text("SELECT count(*) FROM pigeon_idempotency_claims")) or 0,
        }
    engine.dispose()
    return found


def caller(x_user: Annotated[str, Header()] = "anonymous") -> str:
    return x_user


def _ending(order: OrderIn, row: Order) -> Any:
    if order.fail == "raise":
        raise RuntimeError("the handler failed after writing")
    if order.fail in ("400", "429"):
        raise HTTPException(int(order.fail), f"refused with {order.fail}")
    if order.fail == "500":
        return JSONResponse({"error": "failed"}, status_code=500)
    return {"id": row.id, "owner": row.owner, "item": row.item}


def create_app(
    url: str,
    *,
    asynchronous: bool = False,
    after_commit: Callable[[list[str]], None] | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    keyring: Keyring | None = None,
    options: ServerOptions | None = None,
) -> FastAPI:
    """``max_body``, ``keyring``: the app's own; ``options``: a server's (pigeon serve)."""
    pigeon = Pigeon(principal=caller, after_commit=after_commit, max_body=max_body, keyring=keyring)
    app = FastAPI(title="orders under test", lifespan=_disposing_engine)
    if asynchronous:
        _async_routes(app, pigeon, url)
    else:
        _sync_routes(app, pigeon, url)
    pigeon.install(app, options=options)
    return app


@contextlib.asynccontextmanager
async def _disposing_engine(app: FastAPI) -> AsyncIterator[None]:
    """The engine's pooled connections are closed when the app stops, not left to the
    garbage collector (a ResourceWarning from the driver)."""
    yield
    engine = app.state.engine
    if isinstance(engine, AsyncEngine):
        await engine.dispose()
    else:
        engine.dispose()


def session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as s:
        yield s


async def async_session(request: Request) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(request.app.state.engine) as s:
        yield s


def _sync_routes(app: FastAPI, pigeon: Pigeon, url: str) -> None:
    app.state.engine = create_engine(sqlalchemy_url(url), pool_size=20, max_overflow=40)

    @app.post("/orders", status_code=201)
    @pigeon.idempotent
    def create_order(
        order: OrderIn,
        db: Annotated[Session, Depends(session)],
        user: Annotated[str, Depends(caller)],
    ) -> Any:
        row = Order(owner=user, item=order.item)
        db.add(row)
        db.flush()
        defer(db, queue="payments", task="charge", payload={"order": row.id})
        if order.fail == "commit":
            db.commit()
        return _ending(order, row)


def _async_routes(app: FastAPI, pigeon: Pigeon, url: str) -> None:
    app.state.engine = create_async_engine(
        sqlalchemy_url(url, asynchronous=True), pool_size=20, max_overflow=40
    )

    @app.post("/orders", status_code=201)
    @pigeon.idempotent
    async def create_order(
        order: OrderIn,
        db: Annotated[AsyncSession, Depends(async_session)],
        user: Annotated[str, Depends(caller)],
    ) -> Any:
        row = Order(owner=user, item=order.item)
        db.add(row)
        await db.flush()
        await defer_async(db, queue="payments", task="charge", payload={"order": row.id})
        if order.fail == "commit":
            await db.commit()
        await asyncio.sleep(0)
        return _ending(order, row)
