"""Django: exactly once inside the view's own ``transaction.atomic()``.

    INSTALLED_APPS = [..., "pigeon.integrations.django"]     # pigeon's tables, the admin

    from pigeon.integrations.django import defer, idempotent

    @csrf_exempt
    @idempotent
    def create_order(request):
        order = Order.objects.create(...)                        # the view's ORM writes
        defer(queue="payments", task="charge", payload={"order": order.pk})
        return JsonResponse({"id": order.pk}, status=201)

The key's claim, the view's ORM writes, the jobs it defers and the stored response commit
in one transaction of the view's database alias (`pigeon.integrations.django.views`);
``@idempotent_action`` (`pigeon.integrations.django.rest`) does the same for a Django
REST framework handler, ``batch_view`` serves the edge's batches, ``read_bodies_first``
wraps the project's ASGI application so their bodies are read under their limits before
Django's handler reads them whole (`pigeon.integrations.django.asgi`), ``manage.py migrate``
makes pigeon's tables and ``manage.py pigeon_worker`` runs the jobs, whose ORM writes
``orm_effect`` makes once per key (`pigeon.jobs.effects`, in Django's transaction). Settings:
``settings.PIGEON`` (`pigeon.integrations.django.conf`).
"""

from __future__ import annotations

from pigeon.integrations.django import _extra  # noqa: F401  (first: one line naming the extra)
from pigeon.integrations.django.asgi import read_bodies_first
from pigeon.integrations.django.batch import batch_view
from pigeon.integrations.django.rest import idempotent_action
from pigeon.integrations.django.transactions import alias_tx, defer, orm_effect
from pigeon.integrations.django.views import idempotent

__all__ = [
    "alias_tx",
    "batch_view",
    "defer",
    "idempotent",
    "idempotent_action",
    "orm_effect",
    "read_bodies_first",
]
