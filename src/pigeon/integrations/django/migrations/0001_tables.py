"""pigeon's tables, ``pigeon_*``: claims, records, obligations, jobs, outbox, effects.

The tables are made by pigeon's own migrations of its ``server`` component
(`make_tables`). The models after it are the admin's view of three of the tables
(unmanaged: nothing here changes them).
"""

from __future__ import annotations

from typing import Any, ClassVar

import django.db.models.deletion
from django.db import migrations, models

from pigeon.integrations.django.migrations import make_tables

SERVER_VERSION = 12  # pigeon's server schema when this migration was written


class Migration(migrations.Migration):
    initial = True

    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[Any]] = [
        # Irreversible: pigeon's tables hold claims and jobs; drop them by hand.
        migrations.RunPython(make_tables, elidable=False),
        migrations.CreateModel(
            name="BackgroundJob",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("queue", models.TextField()),
                ("task", models.TextField()),
                ("payload", models.TextField()),
                ("status", models.TextField()),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("created_at", models.FloatField()),
                ("scheduled_at", models.FloatField()),
                ("finished_at", models.FloatField(null=True)),
                ("last_error", models.TextField(null=True)),
                ("owner", models.TextField(null=True)),
                ("obligation", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "job",
                "db_table": "pigeon_jobs",
                "ordering": ("-id",),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Record",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("kind", models.TextField()),
                ("data", models.TextField()),
                ("status", models.TextField()),
                ("principal", models.TextField(null=True)),
                ("created_at", models.FloatField()),
                ("completed_at", models.FloatField(null=True)),
            ],
            options={
                "db_table": "pigeon_records",
                "ordering": ("-created_at",),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Obligation",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        db_column="job_id",
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="promise",
                        serialize=False,
                        to="pigeon.backgroundjob",
                    ),
                ),
                ("name", models.TextField()),
                ("status", models.TextField()),
                ("updated_at", models.FloatField()),
            ],
            options={
                "db_table": "pigeon_obligations",
                "ordering": ("-updated_at",),
                "managed": False,
            },
        ),
    ]
