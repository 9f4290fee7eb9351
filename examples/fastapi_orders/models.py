"""The application's own tables: orders, notes, and the notes' ledger of effects."""

from __future__ import annotations

import os

from sqlalchemy import Boolean, Float, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

DEFAULT_DB = "sqlite:///orders.db"


def database_url() -> str:
    """``DATABASE_URL``: any SQLAlchemy URL (sqlite:///..., postgresql+psycopg://...)."""
    return os.environ.get("DATABASE_URL", DEFAULT_DB)


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    item: Mapped[str] = mapped_column(String(255))
    amount_cents: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default="placed")


class Note(Base):
    """A versioned note of one principal; a delete leaves a tombstone (``deleted``)."""

    __tablename__ = "notes"
    principal: Mapped[str] = mapped_column(String(255), primary_key=True)
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    data: Mapped[str] = mapped_column(Text)  # a JSON object
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    clock: Mapped[str] = mapped_column(String(100))
    updated_at: Mapped[float] = mapped_column(Float)


class NoteEffect(Base):
    """One row per write that took effect, in the write's own transaction: a key that
    appears twice here is an effect that happened twice."""

    __tablename__ = "note_effects"
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    idempotency_key: Mapped[str] = mapped_column(String(255))
    principal: Mapped[str] = mapped_column(String(255))
    note_id: Mapped[str] = mapped_column(String(255))
    method: Mapped[str] = mapped_column(String(10))
    version: Mapped[int] = mapped_column(Integer)
    body: Mapped[str] = mapped_column(Text)  # the note's data after the write
