"""The example's own tables: notes (versioned, per principal) and the effect ledger, one
row per write that took effect, written in the write's transaction."""

from django.db import models


class Note(models.Model):
    principal = models.CharField(max_length=255)
    note_id = models.CharField(max_length=255)
    version = models.IntegerField(default=1)
    data = models.JSONField(default=dict)
    deleted = models.BooleanField(default=False)
    clock = models.CharField(max_length=255)
    updated_at = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["principal", "note_id"], name="one_note_per_id")
        ]

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.note_id,
            "version": self.version,
            "data": self.data,
            "clock": self.clock,
            "updated_at": self.updated_at,
        }


class Effect(models.Model):
    """The effect ledger: a duplicate here is an effect done twice."""

    seq = models.BigAutoField(primary_key=True)
    idempotency_key = models.CharField(max_length=255)
    principal = models.CharField(max_length=255)
    operation_id = models.CharField(max_length=255)
    entity = models.CharField(max_length=600)
    method = models.CharField(max_length=10)
    status = models.IntegerField()
    version = models.IntegerField()
    clock = models.CharField(max_length=255)
    applied_at = models.FloatField()
