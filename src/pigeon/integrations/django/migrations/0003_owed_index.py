"""pigeon's server schema 15: the owed jobs' index without an IN list (SQLite)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations

from pigeon.integrations.django.migrations import make_tables

SERVER_VERSION = 15


class Migration(migrations.Migration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("pigeon", "0002_payload_versions")]

    operations: ClassVar[list[Any]] = [migrations.RunPython(make_tables, elidable=False)]
