"""pigeon's tables as Django sees them, for the admin: unmanaged models (pigeon's own
migrations make and change the tables, `pigeon.integrations.django.migrations`), read
only; the admin's actions go through pigeon's stores (`pigeon.jobs.failed`)."""

from __future__ import annotations

from django.db import models


class Record(models.Model):
    """An accepted record (``pigeon.jobs.records.accept``) and its state."""

    id = models.TextField(primary_key=True)
    kind = models.TextField()
    data = models.TextField()
    status = models.TextField()
    principal = models.TextField(null=True)
    created_at = models.FloatField()
    completed_at = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = "pigeon_records"
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class BackgroundJob(models.Model):
    """A job (``pigeon_jobs``): queued, running, done, failed or cancelled."""

    id = models.BigIntegerField(primary_key=True)
    queue = models.TextField()
    task = models.TextField()
    payload = models.TextField()
    status = models.TextField()
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    created_at = models.FloatField()
    scheduled_at = models.FloatField()
    finished_at = models.FloatField(null=True)
    last_error = models.TextField(null=True)
    owner = models.TextField(null=True)
    record = models.ForeignKey(
        Record,
        models.DO_NOTHING,
        null=True,
        db_column="record_id",
        db_constraint=False,
        related_name="jobs",
    )
    obligation = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "pigeon_jobs"
        ordering = ("-id",)
        verbose_name = "job"

    def __str__(self) -> str:
        return f"job {self.id} {self.queue}/{self.task}"


class Obligation(models.Model):
    """What a record promised (one job each), and where it stands. Its job is its key
    here: the table's own key is (record, name), which Django's admin cannot page."""

    job = models.OneToOneField(
        BackgroundJob,
        models.DO_NOTHING,
        primary_key=True,
        db_column="job_id",
        db_constraint=False,
        related_name="promise",
    )
    record = models.ForeignKey(
        Record, models.DO_NOTHING, db_column="record_id", db_constraint=False
    )
    name = models.TextField()
    status = models.TextField()
    updated_at = models.FloatField()

    class Meta:
        managed = False
        db_table = "pigeon_obligations"
        ordering = ("-updated_at",)

    def __str__(self) -> str:
        return f"{self.record_id}: {self.name}"
