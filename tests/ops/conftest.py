"""The server fixtures (a database on each backend) for the operations tests."""

from __future__ import annotations

from tests.server.conftest import db, pg

__all__ = ["db", "pg"]
