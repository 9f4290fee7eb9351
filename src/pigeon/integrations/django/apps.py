"""The Django app of pigeon: ``"pigeon.integrations.django"`` in ``INSTALLED_APPS``."""

from __future__ import annotations

from django.apps import AppConfig


class PigeonConfig(AppConfig):
    """Its migrations make pigeon's tables (``pigeon_*``) in each database Django
    migrates; its admin lists records, obligations and jobs; ``manage.py pigeon_worker``
    runs the jobs."""

    name = "pigeon.integrations.django"
    label = "pigeon"
    verbose_name = "pigeon"
    default_auto_field = "django.db.models.BigAutoField"
