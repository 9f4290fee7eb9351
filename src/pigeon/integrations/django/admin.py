"""The admin's view of pigeon: records, obligations and jobs, read only, and the two ways
out of the failed store (`pigeon.jobs.failed`): retry and cancel, each with the reason
the reviewer gives (required) and the reviewer's name, recorded with the job."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from pigeon.exceptions import InvalidOperation, InvalidState, NotFound
from pigeon.integrations.django.conf import configured
from pigeon.integrations.django.models import BackgroundJob, Obligation, Record
from pigeon.integrations.django.transactions import AliasDatabase
from pigeon.jobs.failed import FailedStore


class ReadOnly(admin.ModelAdmin):
    """Nothing added, changed or deleted here: pigeon's code writes these tables."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields]


@admin.register(Record)
class RecordAdmin(ReadOnly):
    list_display = ("id", "kind", "status", "principal", "created_at", "completed_at")
    list_filter = ("status", "kind")
    search_fields = ("id", "principal")


@admin.register(Obligation)
class ObligationAdmin(ReadOnly):
    list_display = ("record", "name", "status", "job", "updated_at")
    list_filter = ("status", "name")
    search_fields = ("record__id",)


class ReviewForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Why: recorded with each job, beside your name.",
    )


def review(
    modeladmin: admin.ModelAdmin, request: HttpRequest, jobs: QuerySet[Any], action: str
) -> TemplateResponse | None:
    """The form asking for a reason, then ``FailedStore.retry`` or ``.cancel`` of each
    selected job; a job that is not in a state to be reviewed so is named and left."""
    form = ReviewForm(request.POST if "reason" in request.POST else None)
    if not form.is_valid():
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": f"{action.capitalize()} {jobs.count()} job(s)",
            "action": action,
            "form": form,
            "jobs": jobs,
            "opts": modeladmin.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "pigeon/review.html", context)
    store = FailedStore(AliasDatabase(jobs.db, configured().keyring))
    reviewer = request.user.get_username() if request.user.is_authenticated else ""
    done, refused = 0, []
    for job_id in jobs.values_list("id", flat=True):
        try:
            getattr(store, action)(job_id, reviewer=reviewer, reason=form.cleaned_data["reason"])
            done += 1
        except (InvalidOperation, InvalidState, NotFound) as exc:
            refused.append(str(exc))
    modeladmin.message_user(request, f"{action}: {done} job(s)", messages.SUCCESS)
    for reason in refused:
        modeladmin.message_user(request, reason, messages.WARNING)
    return None


@admin.action(
    description="Retry the selected failed jobs (a reason is asked)", permissions=["change"]
)
def retry_jobs(
    modeladmin: admin.ModelAdmin, request: HttpRequest, jobs: QuerySet[Any]
) -> TemplateResponse | None:
    return review(modeladmin, request, jobs, "retry")


@admin.action(description="Cancel the selected jobs (a reason is asked)", permissions=["change"])
def cancel_jobs(
    modeladmin: admin.ModelAdmin, request: HttpRequest, jobs: QuerySet[Any]
) -> TemplateResponse | None:
    return review(modeladmin, request, jobs, "cancel")


@admin.register(BackgroundJob)
class BackgroundJobAdmin(ReadOnly):
    list_display = ("id", "queue", "task", "status", "attempts", "owner", "record", "last_error")
    list_filter = ("status", "queue")
    search_fields = ("id", "task", "record__id")
    actions = (retry_jobs, cancel_jobs)
