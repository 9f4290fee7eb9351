"""pigeon's server schema 13 and 14: task payload versions, the workers' registry."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations

from pigeon.integrations.django.migrations import make_tables

SERVER_VERSION = 14


class Migration(migrations.Migration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("pigeon", "0001_tables")]

    operations: ClassVar[list[Any]] = [migrations.RunPython(make_tables, elidable=False)]
