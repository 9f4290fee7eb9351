"""The notes contract (the reference app's: create, replace, PATCH merge, If-Match,
delete, batch), its reads, the operator's ledger and Django's admin."""

from django.contrib import admin
from django.urls import path

from notes import views
from pigeon.integrations.django import batch_view

urlpatterns = [
    path("notes", views.notes),
    path("notes/<str:note_id>", views.note),
    path("pigeon/v1/batch", batch_view),
    path("pigeon/v1/ledger", views.ledger),
    path("pigeon/v1/health", views.health),
    path("admin/", admin.site.urls),
]
